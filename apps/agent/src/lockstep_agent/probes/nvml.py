"""The GPUs as NVML sees them, through NVIDIA's own bindings (``nvidia-ml-py``, ``pynvml``).

NVML failing to start is itself a fact worth reporting (seed 004: a driver upgraded on disk
but not reloaded makes every NVML call fail with "Driver/library version mismatch"), so
``probe_nvml`` never raises: it returns ``NvmlFacts`` with ``error`` set. A query a GPU does
not support (no GSP on Ampere, no row remapping on consumer boards, a link not wired) leaves
that field None; any other failure of one query is kept in ``GpuFacts.errors``.

The NVML calls and constants are documented in the NVML API Reference (r570): "Device
Queries", "Clocks Event Reasons", "NvLink Methods".
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

T = TypeVar("T")
# pynvml's names of the clock event (throttle) reason bits, e.g. nvmlClocksEventReasonHwSlowdown.
_REASON_PREFIX = "nvmlClocksEventReason"
_NOT_REASONS = ("All", "None")
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


class GpuFacts(BaseModel):
    """One GPU's identity, firmware and health counters (None: not supported or failed)."""

    model_config = ConfigDict(frozen=True)

    index: int
    name: str | None = None
    uuid: str | None = None
    vbios: str | None = None
    gsp_firmware: str | None = None
    gsp_enabled: bool | None = None
    inforom: str | None = None
    sm_clock_mhz: int | None = None
    throttle_reasons: tuple[str, ...] = ()
    temperature_c: int | None = None
    power_w: float | None = None
    ecc_corrected_volatile: int | None = None
    row_remap_pending: bool | None = None
    pcie_replays: int | None = None
    nvlink_crc_errors: int | None = None
    errors: dict[str, str] = {}


class NvmlFacts(BaseModel):
    """What NVML said, or why it could not be asked."""

    model_config = ConfigDict(frozen=True)

    error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: tuple[GpuFacts, ...] = ()

    @property
    def available(self) -> bool:
        return self.error is None


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


def reason_names(nvml: ModuleType | Any, mask: int) -> tuple[str, ...]:
    """The active clock event reasons of ``mask``, as snake_case names of pynvml's constants
    (``nvmlClocksEventReasonHwThermalSlowdown`` -> ``hw_thermal_slowdown``)."""
    out: list[str] = []
    for attr in sorted(dir(nvml)):
        if not attr.startswith(_REASON_PREFIX):
            continue
        short = attr.removeprefix(_REASON_PREFIX)
        bit = getattr(nvml, attr)
        if short in _NOT_REASONS or not isinstance(bit, int) or not bit:
            continue
        if mask & bit == bit:
            out.append(_snake(short))
    return tuple(out)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_version(encoded: int) -> str:
    """NVML's CUDA driver version (1000 * major + 10 * minor) as ``major.minor``."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


class _Gpu:
    """Collects one GPU's answers, each query on its own (one failing spoils no other)."""

    def __init__(self, nvml: Any, index: int) -> None:
        self.nvml = nvml
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self.errors: dict[str, str] = {}

    def ask(self, what: str, call: Callable[[], T]) -> T | None:
        try:
            return call()
        except self.nvml.NVMLError as exc:
            if exc.value not in (self.nvml.NVML_ERROR_NOT_SUPPORTED,):
                self.errors[what] = str(exc)
            return None

    def nvlink_crc(self) -> int | None:
        n, h, total, seen = self.nvml, self.handle, 0, False
        for link in range(n.NVML_NVLINK_MAX_LINKS):
            try:
                total += n.nvmlDeviceGetNvLinkErrorCounter(h, link, n.NVML_NVLINK_ERROR_DL_CRC_FLIT)
                seen = True
            except n.NVMLError:
                continue  # a link that is not there (NOT_SUPPORTED / INVALID_ARGUMENT)
        return total if seen else None


def _gpu(nvml: Any, index: int) -> GpuFacts:
    g, n = _Gpu(nvml, index), nvml
    h = g.handle
    mode = g.ask("gsp_mode", lambda: n.nvmlDeviceGetGspFirmwareMode(h))
    remap = g.ask("remapped_rows", lambda: n.nvmlDeviceGetRemappedRows(h))
    mask = g.ask("clocks_event_reasons", lambda: n.nvmlDeviceGetCurrentClocksEventReasons(h))
    power = g.ask("power", lambda: n.nvmlDeviceGetPowerUsage(h))
    name = g.ask("name", lambda: n.nvmlDeviceGetName(h))
    uuid = g.ask("uuid", lambda: n.nvmlDeviceGetUUID(h))
    vbios = g.ask("vbios", lambda: n.nvmlDeviceGetVbiosVersion(h))
    gsp = g.ask("gsp_firmware", lambda: n.nvmlDeviceGetGspFirmwareVersion(h))
    inforom = g.ask("inforom", lambda: n.nvmlDeviceGetInforomImageVersion(h))
    return GpuFacts(
        index=index,
        name=_text(name) if name is not None else None,
        uuid=_text(uuid) if uuid is not None else None,
        vbios=_text(vbios) if vbios is not None else None,
        gsp_firmware=_text(gsp) or None if gsp is not None else None,
        gsp_enabled=bool(mode[0]) if mode is not None else None,
        inforom=_text(inforom) if inforom is not None else None,
        sm_clock_mhz=g.ask("sm_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
        throttle_reasons=reason_names(n, mask) if mask is not None else (),
        temperature_c=g.ask(
            "temperature", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
        ),
        power_w=power / 1000.0 if power is not None else None,  # NVML reports milliwatts
        ecc_corrected_volatile=g.ask(
            "ecc",
            lambda: n.nvmlDeviceGetTotalEccErrors(
                h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC
            ),
        ),
        # nvmlDeviceGetRemappedRows: (corrected rows, uncorrected rows, pending, failure)
        row_remap_pending=bool(remap[2]) if remap is not None else None,
        pcie_replays=g.ask("pcie_replays", lambda: n.nvmlDeviceGetPcieReplayCounter(h)),
        nvlink_crc_errors=g.nvlink_crc(),
        errors=g.errors,
    )


def _load() -> Any:
    import pynvml

    return pynvml


def probe_nvml(nvml: Any | None = None) -> NvmlFacts:
    """Ask NVML (``nvml``: the ``pynvml`` module, or a stand-in in tests); never raises."""
    try:
        n = nvml if nvml is not None else _load()
    except ImportError as exc:
        return NvmlFacts(error=f"NVML bindings not installed: {exc}")
    try:
        n.nvmlInit()
    except n.NVMLError as exc:
        return NvmlFacts(error=f"NVML did not initialise: {exc}")
    try:
        driver = _text(n.nvmlSystemGetDriverVersion())
        cuda = cuda_version(n.nvmlSystemGetCudaDriverVersion())
        gpus = tuple(_gpu(n, i) for i in range(n.nvmlDeviceGetCount()))
        return NvmlFacts(driver_version=driver, cuda_driver_version=cuda, gpus=gpus)
    except n.NVMLError as exc:
        return NvmlFacts(error=f"NVML query failed: {exc}")
    finally:
        with contextlib.suppress(n.NVMLError):
            n.nvmlShutdown()
