"""Which reports are kept, what they write, which nodes are re-judged, and one node's verdict."""

from __future__ import annotations

import datetime as dt

import pytest

from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.events.v1 import DriftDetected, DriftResolved, ScopeSelector
from lockstep_common.vocabulary import Component, DriftKind, ObservationSource
from lockstep_inventory.domain.evaluate import RolloutFacts
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.ingestion import (
    DriftRow,
    Head,
    Key,
    Observations,
    arrivals,
    judge,
    judgeable,
    keep,
    to_judge,
    to_read,
)
from lockstep_inventory.domain.observation import (
    MAX_SEQUENCE_LEAP,
    ImplausibleReport,
    Observation,
    content_digest,
    unreadable,
)
from lockstep_inventory.domain.pins import Pin

pytestmark = pytest.mark.unit
C = Component
REDFISH, AGENT = ObservationSource.REDFISH, ObservationSource.AGENT
T0 = dt.datetime(2026, 5, 1, 12, tzinfo=dt.UTC)
RULES = packaged_rules()
NODE = NodeEntry(
    id="n1", bmc_url="http://127.0.0.1:8000", profile="gb200", site="ams1", credentials="env:B"
)


def redfish(seq: int, bmc: str = "b1", *, at: dt.datetime | None = None) -> Observation:
    return Observation(
        REDFISH,
        seq,
        at or T0 + dt.timedelta(seconds=seq),
        components={C.BMC: bmc},
        members={"BMC_Fw": bmc},
    )


def stored_state(*reports: tuple[str, Observation]) -> tuple[dict[Key, Head], Observations]:
    """The heads and full rows a store holds after saving ``reports``."""
    heads: dict[Key, Head] = {}
    full: Observations = {}
    for node_id, r in reports:
        heads[(node_id, r.source)] = Head(
            r.source, r.sequence, r.observed_at, r.readable, content_digest(r)
        )
        full.setdefault(node_id, {})[r.source] = r
    return heads, full


# --- which reports are read, kept and written ---------------------------------------------


def test_a_repeat_of_the_stored_versions_needs_no_full_read_and_is_only_touched() -> None:
    heads, _ = stored_state(("n1", redfish(1)))
    incoming = arrivals([("n1", redfish(2))])
    assert to_read(incoming, heads) == set()
    kept = keep(incoming, heads, {})
    assert (kept.applied, kept.ignored) == (1, 0)
    assert kept.rewrite == [] and kept.history == []
    assert kept.touch == [("n1", redfish(2))]
    assert kept.changed == frozenset() and kept.reported == {"n1"}


def test_a_changed_version_is_rewritten_with_its_history() -> None:
    heads, full = stored_state(("n1", redfish(1)))
    incoming = arrivals([("n1", redfish(2, "b2"))])
    assert to_read(incoming, heads) == {"n1"}
    kept = keep(incoming, heads, full)
    assert kept.rewrite == [("n1", redfish(2, "b2"))] and kept.touch == []
    assert kept.history == [("n1", "redfish", "BMC_Fw", "b1", "b2", redfish(2).observed_at)]
    assert kept.changed == {"n1"}


def test_a_first_report_writes_every_member_and_its_readability() -> None:
    kept = keep(arrivals([("n1", redfish(1))]), {}, {})
    at = redfish(1).observed_at
    assert kept.history == [
        ("n1", "redfish", "BMC_Fw", None, "b1", at),
        ("n1", "redfish", "readable", None, "true", at),
    ]
    assert kept.rewrite == [("n1", redfish(1))] and kept.changed == {"n1"}


@pytest.mark.parametrize("seq", [7, 5], ids=["duplicate", "stale"])
def test_duplicate_and_stale_reports_are_ignored(seq: int) -> None:
    heads, full = stored_state(("n1", redfish(7)))
    kept = keep(arrivals([("n1", redfish(seq, "other"))]), heads, full)
    assert (kept.applied, kept.ignored) == (0, 1)
    assert kept.rewrite == kept.touch == []
    assert kept.history == []
    assert kept.reported == frozenset()


def test_a_sweep_replaces_a_stored_redfish_report_whatever_its_sequence() -> None:
    # Issue 26: a "redfish" report off the bus with a large sequence held off every sweep
    # after it, and the node stayed drifted. Sweeps take their ids in order under the lock.
    heads, full = stored_state(("n1", redfish(900_000, "b-evil", at=T0)))
    sweep = redfish(8, "b1", at=T0 + dt.timedelta(minutes=1))
    assert keep(arrivals([("n1", sweep)]), heads, full).applied == 0  # not said to be a sweep
    kept = keep(arrivals([("n1", sweep)]), heads, full, swept=True)
    assert (kept.applied, kept.ignored) == (1, 0)
    assert kept.rewrite == [("n1", sweep)] and kept.changed == {"n1"}
    # The same sweep's report again is still a duplicate, and agent rows keep their order.
    heads, full = stored_state(("n1", sweep), ("n1", Observation(AGENT, 50, T0)))
    again = keep(
        arrivals([("n1", redfish(8, "b2")), ("n1", Observation(AGENT, 49, T0))]),
        heads,
        full,
        swept=True,
    )
    assert (again.applied, again.ignored) == (0, 2)


def test_a_restarted_agent_counting_from_zero_is_kept() -> None:
    heads, full = stored_state(("n1", Observation(AGENT, 900, T0, components={C.DRIVER: "1"})))
    restarted = Observation(AGENT, 0, T0 + dt.timedelta(minutes=6), components={C.DRIVER: "2"})
    kept = keep(arrivals([("n1", restarted)]), heads, full)
    assert kept.applied == 1 and kept.rewrite == [("n1", restarted)]
    assert [(item, old, new) for _, _, item, old, new, _ in kept.history] == [("driver", "1", "2")]


def test_an_unreadable_bmc_keeps_its_versions_and_only_touches_the_row() -> None:
    heads, full = stored_state(("n1", redfish(1)))
    at = T0 + dt.timedelta(minutes=1)
    incoming = arrivals([("n1", unreadable(REDFISH, 2, at, "connection refused"))])
    assert to_read(incoming, heads) == {"n1"}
    kept = keep(incoming, heads, full)
    [(node_id, row)] = kept.touch
    assert node_id == "n1" and kept.rewrite == []
    assert (row.readable, row.error, row.unreadable_since) == (False, "connection refused", at)
    assert row.members == {"BMC_Fw": "b1"}  # last known versions kept
    assert kept.history == [("n1", "redfish", "readable", "true", "false", at)]
    assert kept.changed == {"n1"}


def test_a_head_stored_without_a_digest_is_compared_in_full() -> None:
    heads, full = stored_state(("n1", redfish(1)))
    legacy = {
        k: Head(h.source, h.sequence, h.observed_at, h.readable, None) for k, h in heads.items()
    }
    incoming = arrivals([("n1", redfish(2))])
    assert to_read(incoming, legacy) == {"n1"}
    kept = keep(incoming, legacy, full)
    assert kept.rewrite == [("n1", redfish(2))]  # stores the digest from now on
    assert kept.history == [] and kept.changed == frozenset()


def test_reports_of_one_node_in_one_batch_apply_in_order_and_write_once() -> None:
    heads, full = stored_state(("n1", redfish(1)))
    incoming = arrivals([("n1", redfish(2, "b2")), ("n1", redfish(3, "b3")), ("n1", redfish(2))])
    kept = keep(incoming, heads, full)
    assert (kept.applied, kept.ignored) == (2, 1)
    assert kept.rewrite == [("n1", redfish(3, "b3"))]
    assert [(old, new) for _, _, _, old, new, _ in kept.history] == [("b1", "b2"), ("b2", "b3")]


# --- which nodes are re-judged --------------------------------------------------------------


def test_nodes_are_judged_when_changed_never_judged_or_judged_on_an_earlier_day() -> None:
    same = [(n, redfish(2)) for n in ("same", "never", "yesterday", "unregistered")]
    reports = [("changed", redfish(2, "b2")), *same]
    heads, full = stored_state(*[(n, redfish(1)) for n, _ in reports])
    kept = keep(arrivals(reports), heads, full)
    judged = {
        "changed": T0,
        "same": T0,
        "yesterday": T0 - dt.timedelta(days=1),
        "unregistered": T0 - dt.timedelta(days=1),
    }
    registered = {"changed", "same", "never", "yesterday"}
    assert to_judge(kept, registered, judged, today=T0.date()) == ["changed", "never", "yesterday"]


def test_only_nodes_with_reports_have_state_to_judge() -> None:
    _, full = stored_state(("n2", redfish(1)))
    assert judgeable(["n1", "n2"], full) == ["n2"]


# --- one node's verdict ---------------------------------------------------------------------

PIN = Pin("ams1", ScopeSelector(), "a" * 64, {"gb200": {C.BMC: "b1"}}, 1, T0)
NO_FACTS = RolloutFacts()


def verdict(
    bmc: str, previous: DriftRow | None, facts: RolloutFacts = NO_FACTS
) -> tuple[DriftRow, DriftDetected | DriftResolved | None]:
    j = judge(NODE, {REDFISH: redfish(1, bmc)}, [PIN], facts, previous, now=T0, rules=RULES)
    assert j.node_id == "n1"
    return j.row, j.event


def test_a_first_conforming_verdict_is_stored_without_an_event() -> None:
    row, event = verdict("b1", None)
    assert row == DriftRow(PIN.stack_hash, (), T0, T0) and event is None


def test_a_version_off_the_pin_is_detected_with_its_items() -> None:
    row, event = verdict("b0", DriftRow(PIN.stack_hash, (), T0, T0))
    assert isinstance(event, DriftDetected) and event.items == row.items
    assert (event.node_id, event.site, event.stack_hash) == ("n1", "ams1", PIN.stack_hash)
    assert [(i.component, i.kind) for i in row.items] == [(C.BMC, DriftKind.UNEXPECTED)]


def test_the_same_drift_again_keeps_its_start_and_emits_nothing() -> None:
    drifted, _ = verdict("b0", None)
    earlier = DriftRow(drifted.stack_hash, drifted.items, T0 - dt.timedelta(hours=1), T0)
    row, event = verdict("b0", earlier)
    assert event is None
    assert (row.items, row.since, row.evaluated_at) == (earlier.items, earlier.since, T0)


def test_drift_that_goes_away_is_resolved() -> None:
    drifted, _ = verdict("b0", None)
    row, event = verdict("b1", drifted)
    assert isinstance(event, DriftResolved) and row.items == ()


def test_a_node_in_an_active_wave_drifts_as_pending() -> None:
    row, event = verdict("b2", None, RolloutFacts(active_wave="r1"))
    assert isinstance(event, DriftDetected)
    assert [i.kind for i in row.items] == [DriftKind.PENDING]


def test_an_unpinned_node_is_stored_as_unknown_without_a_drift_event_per_sweep() -> None:
    # Before any pin every node is "unknown": no golden stack yet is not drift (issue 14, 5).
    def unpinned(bmc: str, previous: DriftRow | None) -> tuple[DriftRow, object]:
        j = judge(NODE, {REDFISH: redfish(1, bmc)}, [], NO_FACTS, previous, now=T0, rules=RULES)
        return j.row, j.event

    first, event = unpinned("b1", None)
    assert event is None and [(i.component, i.kind) for i in first.items] == [
        (C.BMC, DriftKind.UNKNOWN)
    ]
    earlier = DriftRow(None, first.items, T0 - dt.timedelta(hours=1), T0)
    row, event = unpinned("b2", earlier)  # its version moved: still nothing to announce
    assert event is None and [i.actual for i in row.items] == ["b2"] and row.since == earlier.since
    # Pinned, the same node's drift is announced again.
    row, event = verdict("b2", row)
    assert isinstance(event, DriftDetected) and row.stack_hash == PIN.stack_hash


def test_a_sequence_leaping_too_far_ahead_is_refused_and_one_just_within_is_kept() -> None:
    # A forged sequence of 2**62 would make every genuine report look stale for good.
    heads, full = stored_state(("n1", redfish(7)))
    with pytest.raises(ImplausibleReport, match="leaps from sequence 7"):
        keep(arrivals([("n1", redfish(7 + MAX_SEQUENCE_LEAP + 1, "other"))]), heads, full)
    kept = keep(arrivals([("n1", redfish(7 + MAX_SEQUENCE_LEAP, "other"))]), heads, full)
    assert kept.applied == 1
