"""`fleet sweep` and `fleet drift` read the same for 8 nodes or 12,500 (issue 14, item 6): a
summary by default, every node with --all; pipes get whole lines and no colour per digit."""

from __future__ import annotations

import io
from typing import Any

import pytest

from lockstep_cli.cli_io import stdout_console
from lockstep_cli.fleet_views import WORST, print_drift, print_sweep

pytestmark = pytest.mark.unit
NODES = 12_500


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def sweep_doc(count: int = NODES) -> dict[str, Any]:
    nodes = []
    for i in range(count):
        if i % 1000 == 7:
            nodes.append({"id": f"node-{i:05d}", "readable": False, "error": "timed out"})
            continue
        bmc = "GB200Nvl-24.09-1" if i % 500 == 3 else "GB200Nvl-24.12-8"
        nodes.append({"id": f"node-{i:05d}", "readable": True, "components": {"bmc": bmc}})
    for n in nodes:
        n.setdefault("components", {})
    unreadable = sum(1 for n in nodes if not n["readable"])
    sweep = {"id": 9, "total": count, "unreadable": unreadable, "seconds": 41.0}
    return {"sweep": sweep | {"drift_detected": 0, "drift_resolved": 0}, "nodes": nodes}


def printed(show: Any, *args: Any, **kwargs: Any) -> str:
    out = io.StringIO()
    show(stdout_console(out), *args, **kwargs)
    return out.getvalue()


def test_a_sweep_of_12500_nodes_is_summarised_in_a_screenful() -> None:
    text = printed(print_sweep, sweep_doc())
    assert len(text.splitlines()) < 40
    assert text.count("UNREADABLE") == WORST and "... and 3 more unreadable" in text
    assert "GB200Nvl-24.12-8 (12462)" in text and "GB200Nvl-24.09-1 (25)" in text
    assert "12500 node(s)" in text and "13 unreadable" in text and "--all" in text


def test_a_sweep_with_all_lists_every_node() -> None:
    text = printed(print_sweep, sweep_doc(1200), every_node=True)
    assert text.count("UNREADABLE") == 2 and "node-01199" in text


def drift_doc() -> list[dict[str, Any]]:
    def entry(i: int, *items: tuple[str, str]) -> dict[str, Any]:
        return {
            "node": f"node-{i:05d}",
            "site": "ams1",
            "pool": "p0",
            "profile": "gb200",
            "since": "2026-11-24T00:00:00+00:00",
            "items": [
                {"component": "bmc", "kind": k, "severity": s, "expected": "a", "actual": "b"}
                | {"detail": "d"}
                for k, s in items
            ],
        }

    doc = [entry(i, ("missing", "warning")) for i in range(3000)]  # 3,000 alike, 2 worse
    doc.append(entry(4000, ("unexpected", "critical")))
    doc.append(entry(4001, ("incompatible", "warning"), ("missing", "warning")))
    return doc


def test_drift_is_counted_by_kind_and_the_worst_nodes_come_first() -> None:
    text = printed(print_drift, drift_doc(), "lockstep")
    lines = text.splitlines()
    assert len(lines) < 60
    [missing] = [line for line in lines if "missing" in line and "3001" in line]
    assert "warning" in missing  # 3,001 nodes, 3,002 items counted in one row
    assert text.index("node-04000") < text.index("node-04001") < text.index("node-00000")
    assert "3002 drifted node(s)" in text and "node-02999" not in text


def test_drift_with_all_shows_every_node_in_full() -> None:
    text = printed(print_drift, drift_doc()[-300:], "lockstep", every_node=True)
    assert all(f"node-0{i}" in text for i in (2702, 2999, 4000, 4001))
    assert "incompatible" in text and "300 drifted node(s)" in text


def test_piped_output_keeps_long_lines_whole_and_a_terminal_gets_no_colour_per_digit() -> None:
    line = "node-00042 " + "97.00.6C.00.03 " * 20
    piped = io.StringIO()
    stdout_console(piped).print(line)
    assert piped.getvalue().rstrip() == line.rstrip()
    tty = Terminal()
    stdout_console(tty).print("node-00042 runs 97.00.6C.00.03")
    assert "\x1b[" not in tty.getvalue()


def test_piped_output_is_as_wide_as_its_content_rules_and_tables_included(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 31: the demo's log piped to a file was 4,096 columns wide (198 kB, 127 lines)."""
    from rich.table import Table

    monkeypatch.delenv("COLUMNS", raising=False)
    piped = io.StringIO()
    console = stdout_console(piped)
    console.rule("a section")
    table = Table(title="nodes")
    for column in ("node", "version"):
        table.add_column(column)
    table.add_row("node-00042", "97.00.6C.00.03")
    console.print(table)
    widths = [len(line) for line in piped.getvalue().splitlines()]
    assert max(widths) <= 80, widths
    assert "a section" in piped.getvalue()
