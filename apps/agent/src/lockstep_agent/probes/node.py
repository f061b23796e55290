"""Everything the agent knows about its node at one moment: ``NodeFacts``, from every probe."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from lockstep_agent.probes.diagnostics import DiagnosticFiles, Diagnostics, probe_diagnostics
from lockstep_agent.probes.dkms import DkmsFacts, probe_dkms
from lockstep_agent.probes.files import FileFacts, probe_files
from lockstep_agent.probes.nvml import NvmlFacts, probe_nvml
from lockstep_agent.probes.xid import Cursor, KernelLog, XidScan, probe_xids


class NodeFacts(BaseModel):
    """One reading of the node: what it runs (files, DKMS, NVML) and the XIDs since the
    cursor the reading started from."""

    model_config = ConfigDict(frozen=True)

    files: FileFacts = FileFacts()
    dkms: DkmsFacts = DkmsFacts()
    nvml: NvmlFacts = NvmlFacts(error="not probed")
    xids: XidScan = XidScan()
    diagnostics: Diagnostics = Diagnostics()


def probe_node(
    root: Path,
    xid_cursor: Cursor | None,
    nvml: Any | None = None,
    kernel_log: KernelLog | None = None,
    diagnostics: DiagnosticFiles | None = None,
) -> NodeFacts:
    """Run every probe on the machine whose filesystem is at ``root`` (``/`` on a node). NVML
    is asked only of the machine's own root (a fake root has no GPUs of its own), unless
    ``nvml`` gives a stand-in for the ``pynvml`` module (a benchmark's). ``kernel_log``: the
    kernel log the running agent follows (default: read whole); ``diagnostics``: where the
    node's DCGM and NCCL runs leave their results (default: none)."""
    if nvml is not None or root == Path("/"):
        gpus = probe_nvml(nvml)
    else:
        gpus = NvmlFacts(error="not probed: not the machine's own root")
    return NodeFacts(
        files=probe_files(root),
        dkms=probe_dkms(root),
        nvml=gpus,
        xids=probe_xids(root, xid_cursor, kernel_log),
        diagnostics=probe_diagnostics(diagnostics, time.time()) if diagnostics else Diagnostics(),
    )
