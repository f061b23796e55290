"""The report buffers' contract, on the disk spool (a real node) and the memory one (a simulated
node): reports kept until acknowledged, bounded with the oldest dropped and counted, state
stored in the same transaction as the reports; and the disk spool keeps all that across
restarts."""

from __future__ import annotations

import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from lockstep_agent.spool import MemorySpool, Outgoing, ReportBuffer, Spool, SpoolError

pytestmark = pytest.mark.unit


def _r(i: int) -> Outgoing:
    return Outgoing(f"ns.telemetry.observed.health.s1.n1.{i}", f"body {i}".encode(), f"id-{i}")


Make = Callable[[int], ReportBuffer]


@pytest.fixture(params=["sqlite", "memory"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Make:
    if request.param == "memory":
        return MemorySpool
    return lambda limit: Spool(tmp_path / "contract.sqlite", limit)


def test_contract_kept_until_acked_oldest_first(make: Make) -> None:
    buf = make(10)
    buf.put([_r(1), _r(2), _r(3)], {"k": "v"})
    assert buf.pending() == [_r(1), _r(2), _r(3)]
    assert buf.pending(2) == [_r(1), _r(2)]
    buf.acked(["id-2", "unknown"])
    assert buf.pending() == [_r(1), _r(3)]
    assert len(buf) == 2
    assert buf.state("k") == "v"
    assert buf.state("absent") is None


def test_contract_bounded_oldest_dropped_and_counted(make: Make) -> None:
    buf = make(3)
    assert buf.put([_r(1), _r(2)]) == 0
    assert buf.put([_r(3), _r(4), _r(5)]) == 2
    assert [r.msg_id for r in buf.pending()] == ["id-3", "id-4", "id-5"]
    assert buf.dropped == 2


def test_contract_a_repeated_id_is_kept_once(make: Make) -> None:
    buf = make(10)
    buf.put([_r(1)])
    buf.put([_r(1)])
    assert len(buf) == 1


def test_contract_a_failed_put_changes_nothing(make: Make) -> None:
    buf = make(10)
    buf.put([_r(1)], {"xid_cursor": "a"})
    bad = Outgoing("s", None, "id-2")  # type: ignore[arg-type] # a report without a body
    with pytest.raises((TypeError, sqlite3.IntegrityError)):
        buf.put([_r(3), bad], {"xid_cursor": "b"})
    assert buf.pending() == [_r(1)]
    assert buf.state("xid_cursor") == "a"


def test_limit_must_hold_a_report() -> None:
    with pytest.raises(ValueError, match="limit"):
        MemorySpool(0)


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


def test_an_unusable_spool_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SpoolError, match=r"^spool .*/file/spool.sqlite: "):
        Spool(blocker / "spool.sqlite", limit=1)
