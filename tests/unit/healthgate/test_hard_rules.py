"""Every hard rule trips at once on a canary node; none blames the rollout for the control's
faults or for a fleet-wide problem."""

from __future__ import annotations

import pytest

from lockstep_common.vocabulary import GateVerdict
from lockstep_gate.decision import HardRule, RuleFinding, RuleHit
from lockstep_gate.hard_rules import check_hard_rules
from lockstep_gate.judge import evaluate
from lockstep_gate.samples import Group, Sample, SampleTable
from tests.unit.healthgate.fleets import BUSBW, STEP, T0, at, policy, series

pytestmark = pytest.mark.unit
CANARY, CONTROL = 8, 40
SOAK = 6  # reports per node


def healthy(*, heartbeats: bool = True) -> list[Sample]:
    """A quiet fleet: busbw at its expected level, heartbeats every STEP."""
    rows: list[Sample] = []
    for group, n in ((Group.CANARY, CANARY), (Group.CONTROL, CONTROL)):
        rows += series(group, BUSBW.name, [[378.0 + i % 3] * SOAK for i in range(n)])
        if heartbeats:
            rows += series(group, "heartbeat", [list(map(float, range(SOAK)))] * n)
    return rows


LAST = T0 + (SOAK - 1) * STEP
EXPECTED = {"expected": {"all": {BUSBW.name: 378.0}}}


def one(node: str, group: Group, metric: str, value: float, time: float = LAST) -> Sample:
    return Sample(node, group, metric, value, time)


def rules_of(
    rows: list[Sample], now: float = LAST, roster: frozenset[str] = frozenset()
) -> tuple[RuleFinding, ...]:
    table = SampleTable.from_rows(rows)
    findings, _ = check_hard_rules(table, policy(**EXPECTED), now=now, roster=roster)
    return findings


def test_a_quiet_fleet_breaks_no_rule_and_passes() -> None:
    table = SampleTable.from_rows(healthy())
    assert rules_of(healthy()) == ()
    assert evaluate(table, policy(**EXPECTED), now=at(LAST)).verdict is GateVerdict.PASSED


@pytest.mark.parametrize(
    ("metric", "value", "rule", "says"),
    [
        ("dcgm_diag_passed", 0.0, HardRule.DCGM_DIAG, "DCGM diagnostic failed"),
        ("xid_79", 1.0, HardRule.FATAL_XID, "XID 79"),
        ("xid_48", 3.0, HardRule.FATAL_XID, "XID 48"),
        ("gsp_init_failed", 1.0, HardRule.GSP_INIT, "GSP initialisation failed"),
        ("device_failed", 1.0, HardRule.DEVICE_FAILED, "device failed"),
    ],
)
def test_one_bad_reading_on_a_canary_node_trips(
    metric: str, value: float, rule: HardRule, says: str
) -> None:
    rows = [*healthy(), one("canary-003", Group.CANARY, metric, value, T0 + STEP)]
    [finding] = rules_of(rows)
    assert (finding.rule, finding.nodes, finding.environmental) == (rule, ("canary-003",), False)
    assert says in finding.detail and "2026-01-01T00:00:10Z" in finding.detail
    # The hit: the reading that broke the rule, its threshold and its time (issue 32's timeline).
    threshold = 1.0 if metric == "dcgm_diag_passed" else 0.0
    [hit] = finding.hits
    assert (hit.node, hit.at, hit.value, hit.threshold) == (
        "canary-003",
        T0 + STEP,
        value,
        threshold,
    )
    decision = evaluate(SampleTable.from_rows(rows), policy(**EXPECTED), now=at(LAST))
    assert decision.verdict is GateVerdict.TRIPPED
    assert decision.offending_nodes == ("canary-003",)
    assert f"hard rule {rule} broken on 1 canary node(s)" in decision.reason


@pytest.mark.parametrize(
    ("metric", "value"),
    [
        ("dcgm_diag_passed", 1.0),
        ("xid_13", 5.0),
        ("xid_79", 0.0),
        ("gsp_init_failed", 0.0),
        ("device_failed", float("nan")),
        ("dcgm_diag_passed", float("nan")),
    ],
)
def test_good_readings_and_non_fatal_xids_trip_nothing(metric: str, value: float) -> None:
    assert rules_of([*healthy(), one("canary-003", Group.CANARY, metric, value)]) == ()


def test_the_fatal_xid_set_is_policy() -> None:
    rows = [*healthy(), one("canary-001", Group.CANARY, "xid_13", 1.0)]
    custom = policy(hard_rules={"fatal_xids": [13]})
    findings, _ = check_hard_rules(SampleTable.from_rows(rows), custom, now=LAST)
    assert [f.rule for f in findings] == [HardRule.FATAL_XID]


def test_a_control_node_failing_is_not_the_rollouts_fault() -> None:
    rows = [*healthy(), one("control-007", Group.CONTROL, "dcgm_diag_passed", 0.0)]
    assert rules_of(rows) == ()


def test_readings_before_the_soak_or_after_now_do_not_count() -> None:
    late = one("canary-001", Group.CANARY, "xid_79", 1.0, LAST + 100)
    assert rules_of([*healthy(), late]) == ()


def bus(node: int, values: list[float]) -> list[Sample]:
    """Busbw readings of one canary node from a step after the others' last report on: the
    control has stopped reporting by then (silent for the heartbeat rule's 3 intervals), so it
    does not hold the canary's readings back."""
    return [
        one(f"canary-{node:03d}", Group.CANARY, BUSBW.name, v, T0 + (SOAK + 1 + i) * STEP)
        for i, v in enumerate(values)
    ]


def test_busbw_under_the_bar_for_consecutive_samples_trips() -> None:
    now = T0 + (SOAK + 4) * STEP
    bar = 0.92 * 378.0
    assert rules_of([*healthy(heartbeats=False), *bus(2, [bar - 1, 378.0, bar - 1])], now) == ()
    [finding] = rules_of([*healthy(heartbeats=False), *bus(2, [378.0, bar - 1, bar - 5])], now)
    assert finding.rule is HardRule.BUSBW and finding.nodes == ("canary-002",)
    assert f"busbw {bar - 5:.1f} below 0.92 x 378.0 = {bar:.1f} in 2 consecutive" in finding.detail
    # The hit is the run's first reading under the bar, when it was taken, against the bar.
    [hit] = finding.hits
    assert (hit.at, hit.value, hit.threshold) == (T0 + (SOAK + 2) * STEP, bar - 1, bar)


def test_busbw_bar_is_the_nodes_own_expected_value_first() -> None:
    rows = [*healthy(heartbeats=False), *bus(2, [340.0, 340.0])]  # 90% of 378, 97% of 350
    own = one("canary-002", Group.CANARY, "nccl_expected_gbps", 350.0, T0)
    now = T0 + (SOAK + 3) * STEP
    assert [f.rule for f in rules_of(rows, now)] == [HardRule.BUSBW]
    assert rules_of([*rows, own], now) == ()


def test_busbw_rule_needs_an_expected_value() -> None:
    rows = [*healthy(heartbeats=False), *bus(2, [100.0, 100.0])]
    findings, _ = check_hard_rules(SampleTable.from_rows(rows), policy(), now=LAST + 100)
    assert findings == ()


def test_busbw_under_the_bar_on_controls_alike_is_environmental() -> None:
    rows = healthy(heartbeats=False)
    low = 0.85 * 378.0
    rows = [
        r
        if not (r.metric == BUSBW.name and int(r.node[-3:]) % 2 == 0)
        else Sample(r.node, r.group, r.metric, low, r.time)
        for r in rows
    ]  # half of each group under the bar
    [finding] = rules_of(rows)
    assert finding.environmental and finding.control_hits == CONTROL // 2
    assert finding.p_value is not None and finding.p_value > 0.001
    decision = evaluate(SampleTable.from_rows(rows), policy(**EXPECTED), now=at(LAST))
    assert decision.verdict is GateVerdict.INCONCLUSIVE
    assert "environmental: hard rule busbw_below_expected broken by 20 of 40" in decision.reason


def test_a_canary_far_worse_than_a_degraded_control_still_trips() -> None:
    rows = healthy(heartbeats=False)
    low = 0.85 * 378.0
    rows = [
        Sample(r.node, r.group, r.metric, low, r.time)
        if r.metric == BUSBW.name and (r.group is Group.CANARY or int(r.node[-3:]) < 4)
        else r
        for r in rows
    ]  # every canary node, 10% of the control
    [finding] = rules_of(rows)
    assert not finding.environmental and finding.p_value is not None and finding.p_value < 0.001


def test_a_heartbeat_gap_longer_than_the_limit_trips() -> None:
    rows = [
        r
        for r in healthy()
        if not (
            r.node == "canary-005"
            and r.metric == "heartbeat"
            and r.time in (T0 + STEP, T0 + 2 * STEP, T0 + 3 * STEP)
        )
    ]
    [finding] = rules_of(rows)
    assert finding.rule is HardRule.HEARTBEAT and finding.nodes == ("canary-005",)
    assert "silent for 40 s (limit 30 s)" in finding.detail
    # The silence began at the heartbeat before the gap, and lasted 40 s against 30.
    assert finding.hits == (
        RuleHit(
            node="canary-005", at=T0, value=40.0, threshold=30.0, detail=finding.hits[0].detail
        ),
    )


def test_a_gap_of_exactly_the_limit_is_tolerated() -> None:
    rows = [
        r
        for r in healthy()
        if not (
            r.node == "canary-005"
            and r.metric == "heartbeat"
            and r.time in (T0 + STEP, T0 + 2 * STEP)
        )
    ]
    assert rules_of(rows) == ()


def test_silence_up_to_now_trips() -> None:
    assert rules_of(healthy(), LAST + 30) == ()
    findings = rules_of(healthy(), LAST + 31)
    [finding] = findings
    assert finding.rule is HardRule.HEARTBEAT and len(finding.nodes) == CANARY
    assert finding.environmental  # every control node is silent too: the network, not the image
    # One hit per node, each silent since its last heartbeat, in time then node order.
    assert [(h.at, h.value) for h in finding.hits] == [(LAST, 31.0)] * CANARY
    assert [h.node for h in finding.hits] == sorted(finding.nodes)


def test_a_node_without_heartbeats_while_others_have_them_trips() -> None:
    rows = [r for r in healthy() if not (r.node == "canary-001" and r.metric == "heartbeat")]
    [finding] = rules_of(rows)
    assert "canary-001: no heartbeat in the window" in finding.detail
    [hit] = finding.hits
    assert (hit.at, hit.value, hit.threshold) == (T0, LAST - T0, 30.0)


def test_a_roster_node_that_sent_nothing_trips() -> None:
    [finding] = rules_of(healthy(), roster=frozenset({"canary-000", "canary-100"}))
    assert finding.rule is HardRule.HEARTBEAT and finding.nodes == ("canary-100",)
    assert "canary-100: no sample at all in the window" in finding.detail
    [hit] = finding.hits  # no reading to show: judged silent when the rules ran
    assert (hit.node, hit.at, hit.value, hit.threshold) == ("canary-100", LAST, None, 30.0)


def test_no_heartbeat_signal_at_all_is_a_note_not_a_trip() -> None:
    findings, notes = check_hard_rules(
        SampleTable.from_rows(healthy(heartbeats=False)), policy(), now=LAST
    )
    assert findings == () and notes == ("heartbeat rule not evaluated: no heartbeat samples",)


def test_rules_are_found_per_stratum() -> None:
    rows = [
        Sample("a-1", Group.CANARY, "xid_79", 1.0, T0, "gb200"),
        Sample("b-1", Group.CANARY, "xid_79", 1.0, T0, "h100"),
        Sample("b-2", Group.CANARY, "xid_79", 0.0, T0, "h100"),
    ]
    findings, _ = check_hard_rules(SampleTable.from_rows(rows), policy(), now=T0)
    assert [(f.stratum, f.nodes, f.canary_nodes) for f in findings] == [
        ("gb200", ("a-1",), 1),
        ("h100", ("b-1",), 2),
    ]


def test_a_fleet_wide_drop_seen_first_on_the_canary_waits_for_the_control() -> None:
    # reliability.md 7.F5: the network degrades everywhere at once, but the canary's reports
    # happen to arrive first. Judged then, the canary would look worse than a control whose low
    # readings are still on their way, and an environmental problem would trip the gate.
    low = 0.6 * 378.0
    canary = series(Group.CANARY, BUSBW.name, [[378.0] * 4 + [low, low]] * CANARY)
    control = series(
        Group.CONTROL, BUSBW.name, [[378.0] * 4 + [low, low]] * CONTROL, start=T0 + STEP / 2
    )
    arrived_first = [r for r in control if r.time < T0 + 5 * STEP]  # half a step behind
    assert rules_of([*canary, *arrived_first], now=T0 + 5 * STEP) == ()
    [finding] = rules_of([*canary, *control], now=T0 + 6 * STEP)  # the control caught up
    assert finding.environmental and finding.control_hits == CONTROL


def test_a_control_whose_telemetry_lags_within_the_heartbeat_limit_still_holds_it_back() -> None:
    # The controls' reports arrive late (a site's link, publish retries, ingest batches):
    # 2.5 intervals behind the canary they are late, not silent (the heartbeat rule allows 3),
    # so a fleet-wide drop seen first on the canary waits for them instead of tripping.
    low = 0.6 * 378.0
    canary = series(Group.CANARY, BUSBW.name, [[378.0] * 4 + [low, low]] * CANARY)
    control = series(
        Group.CONTROL, BUSBW.name, [[378.0] * 4 + [low, low]] * CONTROL, start=T0 + STEP / 2
    )
    lagging = [r for r in control if r.time < T0 + 3 * STEP]
    assert rules_of([*canary, *lagging], now=T0 + 6 * STEP) == ()
    [finding] = rules_of([*canary, *control], now=T0 + 6 * STEP)  # the site caught up
    assert finding.environmental and finding.control_hits == CONTROL


def test_a_control_that_stopped_reporting_does_not_hold_a_slow_canary_back() -> None:
    bar = 0.92 * 378.0
    canary = series(Group.CANARY, BUSBW.name, [[378.0] * 4 + [bar - 9, bar - 9]] * 1)
    control = series(Group.CONTROL, BUSBW.name, [[378.0] * 2] * CONTROL)  # silent since 1 STEP
    [finding] = rules_of([*canary, *control], now=T0 + 6 * STEP)
    assert finding.rule is HardRule.BUSBW and not finding.environmental


def test_a_fleet_wide_drop_one_report_into_the_window_waits_for_controls_with_one_reading() -> None:
    # reliability.md 7.F5 as the health-scenario test failed (1 run in ~40): the ingest check's
    # window begins when the wave was planned, and the network degraded before the next report,
    # so every reading in the window is low. The agents report node by node, and an ingest
    # batch ended just after the first canary node's second report: that node had two low
    # readings, each control one. No control had two readings yet, which was taken for "no
    # control to wait for", and the gate tripped: "1 of 5 canary node(s); control 0 of 5".
    low = 0.6 * 378.0
    nodes = 10
    canary = {0, 1, 2, 3, 9}  # node-00000 reports first in every round
    reports = [(node, T0 + node / 1000) for node in range(nodes)]  # the first round
    reports.append((0, T0 + STEP))  # the batch ends after node-00000's second report

    def rows(more: list[tuple[int, float]]) -> list[Sample]:
        return [
            Sample(
                f"node-{node:05d}",
                Group.CANARY if node in canary else Group.CONTROL,
                BUSBW.name,
                low,
                time,
            )
            for node, time in [*reports, *more]
        ]

    assert rules_of(rows([]), now=T0 + STEP) == ()
    # The next batch brings the control's second round: now both sides have had two reports'
    # chance to show the drop, and the control shows it too.
    second = [(node, T0 + STEP + node / 1000) for node in range(1, nodes)]
    [finding] = rules_of(rows(second), now=T0 + STEP + 1)
    assert finding.environmental and finding.control_hits == nodes - len(canary)
