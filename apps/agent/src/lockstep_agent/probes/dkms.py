"""DKMS's view of the nvidia module: for which kernels it is built and installed.

``dkms status`` is the one interface DKMS documents for this (its tree under /var/lib/dkms is
internal and changed layout between 2.x and 3.x), so this probe runs it, with a fixed argument
list and a timeout, and parses what it prints. Both output formats are parsed (dkms(8)):

- dkms >= 3.0: ``nvidia/580.65.06, 6.8.0-45-generic, x86_64: installed``
- dkms 2.x:    ``nvidia, 440.64, 5.5.9-918.native, x86_64: installed``

and a module only added or built for no kernel (``nvidia/580.65.06: added``). A status may end
in a note in parentheses (``installed (Original modules exist)``): kept, not interpreted.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from lockstep_common.vocabulary import as_version

TIMEOUT_S = 10.0


class DkmsEntry(BaseModel):
    """One line of ``dkms status``."""

    model_config = ConfigDict(frozen=True)

    module: str
    version: str
    kernel: str | None
    arch: str | None
    status: str


class DkmsFacts(BaseModel):
    """What ``dkms status nvidia`` said, or why it could not be asked."""

    model_config = ConfigDict(frozen=True)

    entries: tuple[DkmsEntry, ...] = ()
    error: str | None = None


def parse_status(text: str) -> tuple[DkmsEntry, ...]:
    """Every well-formed line of ``dkms status``; others (warnings DKMS prints) are skipped."""
    out: list[DkmsEntry] = []
    for raw in text.splitlines():
        what, sep, status = raw.rpartition(":")
        if not sep or not what.strip():
            continue
        fields = [f.strip() for f in what.split(",")]
        if "/" in fields[0]:
            module, _, version = fields[0].partition("/")
            rest = fields[1:]
        elif len(fields) >= 2:
            module, version, rest = fields[0], fields[1], fields[2:]
        else:
            continue
        if not module or not version or len(rest) not in (0, 2):
            continue
        kernel, arch = (rest[0], rest[1]) if rest else (None, None)
        out.append(
            DkmsEntry(
                module=module,
                version=as_version(version),
                kernel=kernel,
                arch=arch,
                status=status.strip(),
            )
        )
    return tuple(out)


def probe_dkms(root: Path, module: str = "nvidia") -> DkmsFacts:
    """Run ``dkms status <module>`` on this machine (only when ``root`` is ``/``: a fake root
    has no DKMS of its own)."""
    if root != Path("/"):
        return DkmsFacts(error="not probed: not the machine's own root")
    binary = shutil.which("dkms")
    if binary is None:
        return DkmsFacts(error="dkms is not installed")
    try:
        done = subprocess.run(
            [binary, "status", module],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return DkmsFacts(error=f"dkms status: {exc}")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return DkmsFacts(error=f"dkms status exited {done.returncode}: {last}")
    return DkmsFacts(entries=parse_status(done.stdout))
