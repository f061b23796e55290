"""``dkms status`` parsed from real output of both formats; hostile lines skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep_agent.probes.dkms import DkmsEntry, parse_status, probe_dkms
from tests.reference import REFERENCE

pytestmark = pytest.mark.unit
ISSUES = REFERENCE / "node-agent" / "issues"


def test_dkms3_status_with_the_nvidia_module() -> None:
    entries = parse_status((ISSUES / "dkms-status.nvidia-535.86.05").read_text())
    assert entries[0] == DkmsEntry(
        module="nvidia",
        version="535.86.05",
        kernel="6.5.0-060500rc5-generic",
        arch="x86_64",
        status="installed",
    )
    assert [e.module for e in entries] == ["nvidia", "rtl8852bu"]


def test_a_status_note_is_kept() -> None:
    (entry,) = parse_status((ISSUES / "dkms-status.warning").read_text())
    assert entry.kernel == "6.11.11-2-pve"
    assert entry.status == "installed (WARNING! Diff between built and installed module!)"


def test_dkms2_format_and_a_module_built_for_no_kernel() -> None:
    # dkms 2.x separates module and version with a comma (dkms(8) of 2.8).
    text = "nvidia, 440.64, 5.5.9-918.native, x86_64: installed\nnvidia/580.65.06: added\n"
    old, added = parse_status(text)
    assert (old.module, old.version, old.kernel) == ("nvidia", "440.64", "5.5.9-918.native")
    assert (added.version, added.kernel, added.status) == ("580.65.06", None, "added")


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Error! something",
        ": installed",
        "nvidia/580, k: installed",
        "nvidia/: added",
        "a, b, c, d, e: installed",
    ],
)
def test_lines_that_are_no_entry_are_skipped(line: str) -> None:
    assert parse_status(line) == ()


def test_a_fake_root_does_not_ask_this_machines_dkms(tmp_path: Path) -> None:
    facts = probe_dkms(tmp_path)
    assert facts.entries == ()
    assert facts.error == "not probed: not the machine's own root"
