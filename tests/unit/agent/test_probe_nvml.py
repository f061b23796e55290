"""The NVML probe: NVML failing is reported as a fact, never raised; on a machine with a GPU
the real library is asked (skipped, saying why, where there is none)."""

from __future__ import annotations

import types
from typing import Any

import pynvml
import pytest

from lockstep_agent.probes.nvml import cuda_version, probe_nvml, reason_names

pytestmark = pytest.mark.unit


def _nvml_failing_with(code: int) -> Any:
    """pynvml itself, with nvmlInit failing as the driver makes it fail."""
    fake = types.SimpleNamespace(**{k: getattr(pynvml, k) for k in dir(pynvml)})

    def init() -> None:
        raise pynvml.NVMLError(code)

    fake.nvmlInit = init
    return fake


def test_driver_library_mismatch_is_reported_not_raised() -> None:
    # Seed 004: a driver upgraded on disk but not reloaded.
    facts = probe_nvml(_nvml_failing_with(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH))
    assert not facts.available
    assert facts.error == "NVML did not initialise: RM has detected an NVML/RM version mismatch."
    assert facts.gpus == ()


def test_clock_event_reasons_named_from_the_bindings_constants() -> None:
    mask = pynvml.nvmlClocksEventReasonHwThermalSlowdown | pynvml.nvmlClocksEventReasonSwPowerCap
    assert reason_names(pynvml, mask) == ("hw_thermal_slowdown", "sw_power_cap")
    assert reason_names(pynvml, 0) == ()


def test_cuda_driver_version_decoding() -> None:
    assert cuda_version(12040) == "12.4"
    assert cuda_version(13000) == "13.0"


def test_nvml_on_this_machine() -> None:
    facts = probe_nvml()
    if not facts.available:
        pytest.skip(f"no GPU here: NVML says {facts.error!r} (the probe reported it, no crash)")
    assert facts.driver_version
    assert facts.gpus, "NVML started but listed no GPU"
    for gpu in facts.gpus:
        assert gpu.uuid and gpu.uuid.startswith("GPU-")
