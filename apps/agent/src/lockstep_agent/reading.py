"""The node's in-band state as the updater's in-band step reads it (``read-state``: a
``NodeReading``), from one reading of the probes (pure: no I/O).

The updater decides each call from this reading alone (``lockstep_updater.domain.inband``), so
the phase says where the driver package unit stands, in seed 004's terms:

- the installed package is the newest ``nvidia`` source DKMS knows (the package manager keeps
  one; a precompiled-module package has none, and the loaded module is what is installed);
- ``dkms_built`` / ``dkms_failed``: a package other than the loaded module is on disk, its
  module built for the running kernel (``installed``/``built``) or not (``added``: the
  package's own build failed, seed 004 step 5 forces it once);
- ``ready``: the loaded module is the installed package and its GSP firmware directory is
  there; ``gsp_mismatch``: the module loaded without it (``RmFetchGspRmImages``);
- the diagnostic passes when NVML starts and answers for at least one GPU and, where the node
  runs DCGM (``probes.diagnostics``), its last ``dcgmi diag`` passed.
"""

from __future__ import annotations

from pathlib import Path

from lockstep_agent.probes.dkms import DkmsEntry, probe_dkms
from lockstep_agent.probes.files import probe_files
from lockstep_agent.probes.node import NodeFacts
from lockstep_agent.probes.nvml import NvmlFacts, probe_nvml
from lockstep_common.events.v1 import NodeReading
from lockstep_common.versions import DOT_INTEGER, newest
from lockstep_common.vocabulary import as_version

BUILT = frozenset({"installed", "built"})  # dkms status(8): built, or built and installed
UNKNOWN = "unknown"


def node_reading(facts: NodeFacts) -> NodeReading:
    """``facts`` as the updater's in-band step reads them."""
    files, nvml = facts.files, facts.nvml
    loaded = files.loaded_module
    nvidia = [e for e in facts.dkms.entries if e.module == "nvidia"]
    installed = newest((e.version for e in nvidia), DOT_INTEGER) or loaded
    gsp = sorted({g.gsp_firmware for g in nvml.gpus if g.gsp_firmware})
    dkms = _dkms(nvidia, installed, files.kernel)
    if installed is None:
        phase = "driver_installed"  # no driver at all: the unit starts from the install
    elif installed != loaded:
        phase = "dkms_built" if dkms == "built" else "dkms_failed"
    elif loaded in files.firmware_dirs:
        phase = "ready"
    else:
        phase = "gsp_mismatch"
    return NodeReading(
        phase=phase,
        driver=as_version(installed or UNKNOWN),
        loaded_module=loaded,
        gsp_firmware=gsp[0] if gsp else None,
        firmware_dirs=files.firmware_dirs,
        dkms=dkms,
        cuda=as_version(files.cuda or nvml.cuda_driver_version or UNKNOWN),
        nccl=as_version(files.nccl or UNKNOWN),
        fabric_manager=None,
        diag_passed=_diag_passed(facts),
    )


def _diag_passed(facts: NodeFacts) -> bool:
    """The node's last DCGM diagnostic where it has one; else NVML answering for a GPU."""
    nvml, dcgm = facts.nvml, facts.diagnostics.dcgm
    return nvml.available and bool(nvml.gpus) and (dcgm is None or dcgm.passed)


def read_node(root: Path) -> NodeReading:
    """Probe the machine at ``root`` for a ``read-state`` (no kernel log: XIDs are the
    reports', not the step's)."""
    own = root == Path("/")
    nvml = probe_nvml() if own else NvmlFacts(error="not probed: not the machine's own root")
    return node_reading(NodeFacts(files=probe_files(root), dkms=probe_dkms(root), nvml=nvml))


def _dkms(entries: list[DkmsEntry], version: str | None, kernel: str | None) -> str:
    """DKMS's state of ``version`` for the running kernel: built, added (not built) or none."""
    # The first word: DKMS appends notes ("installed (WARNING! Diff between built and ...)").
    states = {
        e.status.split(" ", 1)[0]
        for e in entries
        if e.version == version and e.kernel in {kernel, None}
    }
    if states & BUILT:
        return "built"
    return "added" if states else "none"
