"""What a node runs, read from files: the loaded kernel module, the driver's own version line,
the firmware directories, the CUDA toolkit, NCCL, the NICs' firmware and the kernel release.

Each reader takes the filesystem root (``/`` on a node, a fake root in tests) and returns None
(or an empty collection) for what is not there: a node without InfiniBand or without a CUDA
toolkit is a fact, not an error. Nothing here shells out; the parsers are pure functions of
the text the kernel or the package wrote, so the tests run them on real captured files.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from lockstep_common.vocabulary import as_version

# Where each fact lives below the root (Linux sysfs/procfs ABI; NVIDIA's driver README,
# "Installing the NVIDIA driver" for /lib/firmware/nvidia/<version>/gsp_*.bin; the CUDA
# toolkit's version.json since CUDA 11.1).
LOADED_MODULE = "sys/module/nvidia/version"
PROC_VERSION = "proc/driver/nvidia/version"
FIRMWARE_DIR = "lib/firmware/nvidia"
CUDA_VERSION_JSON = "usr/local/cuda/version.json"
INFINIBAND = "sys/class/infiniband"
KERNEL_RELEASE = "proc/sys/kernel/osrelease"
# Where distributions and NVIDIA's packages put libnccl.so.<major>.<minor>.<patch>.
NCCL_LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib")
NCCL_SONAME = "libnccl.so."
# Fields of the NVRM line are separated by two or more spaces (NVIDIA's utils.mk builds it so).
_FIELDS = re.compile(r"\s{2,}")


class DriverLine(BaseModel):
    """``/proc/driver/nvidia/version``'s first line, parsed."""

    model_config = ConfigDict(frozen=True)

    version: str
    open_module: bool
    """The open GPU kernel module ("NVIDIA UNIX Open Kernel Module"), needed by GSP-only GPUs."""
    build: str
    """The rest of the line (build host and date), kept as evidence."""


class FileFacts(BaseModel):
    """Everything the file probes read."""

    model_config = ConfigDict(frozen=True)

    loaded_module: str | None = None
    driver: DriverLine | None = None
    firmware_dirs: tuple[str, ...] = ()
    cuda: str | None = None
    nccl: str | None = None
    nic_firmware: dict[str, str] = {}
    kernel: str | None = None


def parse_driver_line(text: str) -> DriverLine | None:
    """The module's version line (``NVRM version: NVIDIA UNIX [Open ]Kernel Module[ for ARCH]
    VERSION  BUILD...``), or None when ``text`` holds none."""
    for line in text.splitlines():
        head, sep, rest = line.partition("NVRM version:")
        if not sep or head.strip():
            continue
        fields = _FIELDS.split(rest.strip())
        if len(fields) < 2 or not fields[1]:
            return None
        return DriverLine(
            version=as_version(fields[1]),
            open_module="Open Kernel Module" in fields[0],
            build="  ".join(fields[2:]),
        )
    return None


def parse_cuda_version(text: str) -> str | None:
    """The toolkit's version from its ``version.json`` (``{"cuda": {"version": ...}}``)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    cuda = doc.get("cuda") if isinstance(doc, dict) else None
    version = cuda.get("version") if isinstance(cuda, dict) else None
    return as_version(version) if isinstance(version, str) and version else None


def nccl_from_names(names: list[str]) -> str | None:
    """NCCL's version from the library files' names: the highest full soname
    ``libnccl.so.MAJOR.MINOR.PATCH`` (the file a ``libnccl.so.2`` link resolves to)."""
    best: tuple[int, ...] | None = None
    for name in names:
        if not name.startswith(NCCL_SONAME):
            continue
        parts = name.removeprefix(NCCL_SONAME).split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            continue
        key = tuple(int(p) for p in parts)
        best = key if best is None or key > best else best
    return ".".join(map(str, best)) if best is not None else None


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _first_line(path: Path) -> str | None:
    text = _text(path)
    line = text.strip().splitlines()[0].strip() if text and text.strip() else ""
    return as_version(line) if line else None


def firmware_dirs(root: Path) -> tuple[str, ...]:
    """The driver versions with a firmware directory (``/lib/firmware/nvidia/<version>/``)."""
    base = root / FIRMWARE_DIR
    try:
        return tuple(sorted(as_version(p.name) for p in base.iterdir() if p.is_dir()))
    except OSError:
        return ()


def nic_firmware(root: Path) -> dict[str, str]:
    """Each RDMA device's firmware version (``/sys/class/infiniband/<dev>/fw_ver``)."""
    base = root / INFINIBAND
    try:
        devices = sorted(base.iterdir())
    except OSError:
        return {}
    out: dict[str, str] = {}
    for dev in devices:
        version = _first_line(dev / "fw_ver")
        if version is not None:
            out[dev.name] = version
    return out


def nccl_version(root: Path) -> str | None:
    """NCCL's version from its soname in the usual library directories."""
    names: list[str] = []
    for d in NCCL_LIB_DIRS:
        try:
            names.extend(p.name for p in (root / d).iterdir())
        except OSError:
            continue
    return nccl_from_names(names)


def probe_files(root: Path) -> FileFacts:
    """Read every file fact below ``root``."""
    proc = _text(root / PROC_VERSION)
    cuda = _text(root / CUDA_VERSION_JSON)
    return FileFacts(
        loaded_module=_first_line(root / LOADED_MODULE),
        driver=parse_driver_line(proc) if proc is not None else None,
        firmware_dirs=firmware_dirs(root),
        cuda=parse_cuda_version(cuda) if cuda is not None else None,
        nccl=nccl_version(root),
        nic_firmware=nic_firmware(root),
        kernel=_first_line(root / KERNEL_RELEASE),
    )
