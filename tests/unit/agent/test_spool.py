"""The spool keeps reports across restarts until acknowledged, bounded, oldest dropped and
counted, and stores the agent's state in the same transaction as the reports."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from lockstep_agent.spool import Outgoing, Spool, SpoolError

pytestmark = pytest.mark.unit


def _r(i: int) -> Outgoing:
    return Outgoing(f"ns.telemetry.observed.health.s1.n1.{i}", f"body {i}".encode(), f"id-{i}")


def test_reports_survive_a_restart_until_acked(tmp_path: Path) -> None:
    path = tmp_path / "agent" / "spool.sqlite"
    spool = Spool(path, limit=10)
    spool.put([_r(1), _r(2)], {"inventory_sequence": "2"})
    spool.close()
    again = Spool(path, limit=10)
    assert again.pending() == [_r(1), _r(2)]
    assert again.state("inventory_sequence") == "2"
    again.acked(["id-1"])
    assert again.pending() == [_r(2)]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_full_spool_drops_the_oldest_and_counts_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    spool = Spool(path, limit=3)
    assert spool.put([_r(1), _r(2)]) == 0
    assert spool.put([_r(3), _r(4), _r(5)]) == 2
    assert [r.msg_id for r in spool.pending()] == ["id-3", "id-4", "id-5"]
    spool.close()
    again = Spool(path, limit=3)
    assert again.dropped == 2
    again.put([_r(6)])
    assert again.dropped == 3


def test_the_same_report_twice_is_kept_once(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.sqlite", limit=10)
    spool.put([_r(1)])
    spool.put([_r(1)])
    assert len(spool) == 1


def test_a_failed_put_changes_neither_reports_nor_state(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.sqlite", limit=10)
    spool.put([_r(1)], {"xid_cursor": "a"})
    bad = Outgoing("s", None, "id-2")  # type: ignore[arg-type] # NOT NULL payload: refused
    with pytest.raises(Exception, match="NOT NULL"):
        spool.put([bad], {"xid_cursor": "b"})
    assert spool.pending() == [_r(1)]
    assert spool.state("xid_cursor") == "a"


def test_an_unusable_spool_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SpoolError, match=r"^spool .*/file/spool.sqlite: "):
        Spool(blocker / "spool.sqlite", limit=1)
