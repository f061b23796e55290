"""Drift kinds, severities, and emit-only-on-change with ordered, idempotent reports."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.events.v1 import DriftItem
from lockstep_common.vocabulary import Component, DriftKind, ObservationSource, Severity
from lockstep_inventory.domain.drift import Emit, classify, decide
from lockstep_inventory.domain.observation import SEQUENCE_RESET_AFTER, Observation

pytestmark = pytest.mark.unit
C = Component
TODAY = dt.date(2026, 5, 1)
RULES = packaged_rules()
PIN = {C.BMC: "GB200Nvl-24.12-8", C.GPU_VBIOS: "97.00.6C.00.03", C.NIC: "28.42.1234"}
REDFISH, AGENT = ObservationSource.REDFISH, ObservationSource.AGENT


def _classify(
    actual: Mapping[Component, str],
    pinned: Mapping[Component, str] | None = PIN,
    *,
    in_active_wave: bool = False,
    recorded_change: bool = False,
    conflicts: Mapping[Component, Mapping[str, str]] | None = None,
) -> tuple[DriftItem, ...]:
    return classify(
        actual,
        pinned,
        in_active_wave=in_active_wave,
        recorded_change=recorded_change,
        profile="gb200",
        today=TODAY,
        conflicts=conflicts,
        rules=RULES,
    )


def _kinds(items: tuple[DriftItem, ...]) -> set[tuple[Component, DriftKind, Severity]]:
    return {(i.component, i.kind, i.severity) for i in items}


def test_a_conforming_node_has_no_drift() -> None:
    assert _classify(dict(PIN)) == ()


def test_pending_in_an_active_wave() -> None:
    items = _classify({**PIN, C.BMC: "GB200Nvl-25.01-1"}, in_active_wave=True)
    assert _kinds(items) == {(C.BMC, DriftKind.PENDING, Severity.INFO)}
    assert (items[0].expected, items[0].actual) == ("GB200Nvl-24.12-8", "GB200Nvl-25.01-1")


def test_recorded_change_outside_a_wave_is_pending_warning() -> None:
    items = _classify({**PIN, C.BMC: "GB200Nvl-24.09-4"}, recorded_change=True)
    assert _kinds(items) == {(C.BMC, DriftKind.PENDING, Severity.WARNING)}


@pytest.mark.parametrize(
    "story",
    ["hand hot-fix (newer)", "RMA part with factory firmware (older)", "silent revert (older)"],
)
def test_unrecorded_change_is_unexpected_and_critical(story: str) -> None:
    version = "97.00.80.00.01" if "newer" in story else "97.00.52.00.01"
    items = _classify({**PIN, C.GPU_VBIOS: version})
    assert _kinds(items) == {(C.GPU_VBIOS, DriftKind.UNEXPECTED, Severity.CRITICAL)}
    assert "no rollout recorded" in items[0].detail


def test_missing_pinned_component() -> None:
    actual: dict[Component, str] = {c: v for c, v in PIN.items() if c is not C.NIC}
    items = _classify(actual)
    assert _kinds(items) == {(C.NIC, DriftKind.MISSING, Severity.WARNING)}
    assert (items[0].expected, items[0].actual) == ("28.42.1234", None)


def test_observed_but_not_pinned_is_unknown() -> None:
    items = _classify({**PIN, C.PSU: "0204.0201.0202"})
    assert _kinds(items) == {(C.PSU, DriftKind.UNKNOWN, Severity.INFO)}


def test_no_pin_at_all_makes_every_observed_component_unknown() -> None:
    items = _classify(dict(PIN), None)
    assert _kinds(items) == {(c, DriftKind.UNKNOWN, Severity.INFO) for c in PIN}


def test_member_conflict_is_unexpected_outside_a_wave_and_pending_inside() -> None:
    actual: dict[Component, str] = {c: v for c, v in PIN.items() if c is not C.GPU_VBIOS}
    conflicts = {C.GPU_VBIOS: {"HGX_FW_GPU_0": "97.00.6C.00.03", "HGX_FW_GPU_1": "97.00.72.00.00"}}
    outside = _classify(actual, conflicts=conflicts)
    assert _kinds(outside) == {(C.GPU_VBIOS, DriftKind.UNEXPECTED, Severity.CRITICAL)}
    assert outside[0].actual == "97.00.6C.00.03|97.00.72.00.00"
    assert "HGX_FW_GPU_1=97.00.72.00.00" in outside[0].detail
    inside = _classify(actual, conflicts=conflicts, in_active_wave=True)
    assert _kinds(inside) == {(C.GPU_VBIOS, DriftKind.PENDING, Severity.INFO)}


def test_compatibility_items_join_the_drift_set() -> None:
    pin = {C.DRIVER: "580.65.06", C.GPU_GSP: "580.65.06"}
    items = _classify({C.DRIVER: "580.65.06", C.GPU_GSP: "570.172.08"}, pin)
    assert _kinds(items) == {
        (C.GPU_GSP, DriftKind.UNEXPECTED, Severity.CRITICAL),
        (C.GPU_GSP, DriftKind.GSP_MISMATCH, Severity.CRITICAL),
    }


def test_items_are_sorted_deterministically() -> None:
    actual = {C.NIC: "1", C.BMC: "2", C.PSU: "3"}
    assert _classify(actual) == _classify(dict(reversed(actual.items())))


# --- emit-only-on-change ------------------------------------------------------------------


T0 = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)


@dataclass
class Node:
    """A node fed reports the way ``ingest.apply_reports`` applies them: a report replaces the
    stored one of its source only when it supersedes it, and ``decide`` says what to emit."""

    last: dict[ObservationSource, Observation] = field(default_factory=dict)
    items: tuple[DriftItem, ...] = ()
    emitted: list[Emit] = field(default_factory=list)
    seq: int = 0

    def report(
        self,
        items: tuple[DriftItem, ...],
        source: ObservationSource = REDFISH,
        seq: int | None = None,
    ) -> Emit:
        if seq is None:
            self.seq += 1
            seq = self.seq
        incoming = Observation(source, seq, T0 + dt.timedelta(seconds=seq))
        if not incoming.supersedes(self.last.get(source)):
            emit = Emit.IGNORED
        else:
            self.last[source] = incoming
            emit = decide(self.items, items)
            if emit is not Emit.NOTHING:
                self.items = items
        self.emitted.append(emit)
        return emit


DRIFTED: dict[str, tuple[DriftItem, ...]] = {
    "pending": _classify({**PIN, C.BMC: "new"}, in_active_wave=True),
    "unexpected": _classify({**PIN, C.BMC: "hotfix"}),
    "missing": _classify({C.BMC: PIN[C.BMC], C.GPU_VBIOS: PIN[C.GPU_VBIOS]}),
    "unknown": _classify({**PIN, C.PSU: "1"}),
    "incompatible": _classify({**PIN, C.DRIVER: "535.230.02"}, {**PIN, C.DRIVER: "535.230.02"}),
    "gsp_mismatch": _classify(
        {**PIN, C.DRIVER: "580.65.06", C.GPU_GSP: "570.172.08"},
        {**PIN, C.DRIVER: "580.65.06", C.GPU_GSP: "570.172.08"},
    ),
}


@pytest.mark.parametrize("kind", sorted(DRIFTED))
def test_every_kind_is_detected_once_then_resolved(kind: str) -> None:
    items = DRIFTED[kind]
    assert {i.kind for i in items} == {DriftKind(kind)}
    node = Node()
    assert node.report(()) is Emit.NOTHING
    assert node.report(items) is Emit.DETECTED
    assert node.report(items) is Emit.NOTHING  # the next sweep sees the same drift
    assert node.report(items) is Emit.NOTHING
    assert node.report(()) is Emit.RESOLVED
    assert node.report(()) is Emit.NOTHING
    assert node.emitted.count(Emit.DETECTED) == 1


def test_a_changed_drift_set_is_detected_again() -> None:
    node = Node()
    node.report(DRIFTED["pending"])
    assert node.report(DRIFTED["pending"] + DRIFTED["unknown"]) is Emit.DETECTED
    assert node.report(DRIFTED["unknown"]) is Emit.DETECTED
    assert node.items == DRIFTED["unknown"]


def test_detail_wording_alone_does_not_re_emit() -> None:
    item = DRIFTED["unexpected"][0]
    reworded = item.model_copy(update={"detail": "other words"})
    assert decide((item,), (reworded,)) is Emit.NOTHING


def test_duplicate_and_stale_reports_are_ignored() -> None:
    node = Node()
    assert node.report(DRIFTED["unexpected"], seq=7) is Emit.DETECTED
    # a replay of report 7 and a late report 5 change nothing, even with different content
    for stale_seq in (7, 5):
        assert node.report((), seq=stale_seq) is Emit.IGNORED
        assert node.items == DRIFTED["unexpected"]
    assert node.report((), seq=8) is Emit.RESOLVED


def test_out_of_order_delivery_ends_in_the_same_state_as_in_order() -> None:
    reports = [(1, DRIFTED["pending"]), (2, DRIFTED["unexpected"]), (3, ())]
    in_order = Node()
    for seq, items in reports:
        in_order.report(items, seq=seq)
    shuffled = Node()
    for seq, items in [reports[2], reports[0], reports[1]]:
        shuffled.report(items, seq=seq)
    assert shuffled.items == in_order.items == ()
    assert shuffled.last == in_order.last


def test_sequences_are_per_source() -> None:
    node = Node()
    node.report((), REDFISH, seq=10)
    assert node.report(DRIFTED["gsp_mismatch"], AGENT, seq=1) is Emit.DETECTED
    assert node.report((), AGENT, seq=1) is Emit.IGNORED
    assert node.report(DRIFTED["gsp_mismatch"], REDFISH, seq=11) is Emit.NOTHING


def test_an_agent_restart_resets_its_sequence_after_the_reset_horizon() -> None:
    node = Node()
    node.report(DRIFTED["gsp_mismatch"], AGENT, seq=500)
    restarted = Observation(AGENT, 0, T0 + dt.timedelta(seconds=500) + SEQUENCE_RESET_AFTER * 2)
    late = Observation(AGENT, 3, T0 + dt.timedelta(seconds=499))
    assert restarted.supersedes(node.last[AGENT])
    assert not late.supersedes(node.last[AGENT])
