"""A decision becomes the gate event that carries it, within the event's bounds."""

from __future__ import annotations

import numpy as np
import pytest

from lockstep_common.events.v1 import GateInconclusive, GatePassed, GateTripped
from lockstep_common.vocabulary import GateVerdict
from lockstep_gate.judge import evaluate
from lockstep_gate.samples import Group, Sample
from lockstep_healthgate.domain.evidence import event_evidence, gate_event
from tests.unit.healthgate.fleets import BUSBW, T0, TEMP, end, fleet, normal_nodes, policy

pytestmark = pytest.mark.unit


def _decision(canary_busbw: float, *, xid: bool = False, temp: bool = True) -> object:
    rng = np.random.default_rng(1)
    metrics = {
        BUSBW.name: (
            normal_nodes(rng, 10, canary_busbw, node_sd=3, sample_sd=1),
            normal_nodes(rng, 12, 378.0, node_sd=3, sample_sd=1),
        )
    }
    # Without ``temp`` the canary stopped reporting it while the control did not: no data.
    metrics[TEMP.name] = ([[60.0] * 5] * 10 if temp else [], [[60.0] * 5] * 12)
    extra = [Sample("canary-004", Group.CANARY, "xid_79", 2.0, T0)] if xid else []
    table = fleet(metrics, extra=extra)
    return evaluate(table, policy(BUSBW, TEMP), now=end(table))


@pytest.mark.parametrize(
    ("busbw", "xid", "temp", "event", "verdict"),
    [
        (378.0, False, True, GatePassed, GateVerdict.PASSED),
        (350.0, True, True, GateTripped, GateVerdict.TRIPPED),
        (378.0, False, False, GateInconclusive, GateVerdict.INCONCLUSIVE),
    ],
)
def test_each_verdict_is_its_own_event(
    busbw: float, xid: bool, temp: bool, event: type, verdict: GateVerdict
) -> None:
    decision = _decision(busbw, xid=xid, temp=temp)
    made = gate_event(decision, rollout_id="r-1", wave=2)  # type: ignore[arg-type]
    assert type(made) is event and made.verdict is verdict
    assert (made.rollout_id, made.wave) == ("r-1", 2)


def test_tripped_evidence_lists_rules_then_failing_metrics_with_medians() -> None:
    decision = _decision(350.0, xid=True)
    evidence = event_evidence(decision)  # type: ignore[arg-type]
    assert [(e.metric, e.passed) for e in evidence] == [
        ("fatal_xid", False),
        ("nccl_busbw_gbps", False),
        ("gpu_temperature_c", True),
    ]
    busbw = evidence[1]
    assert busbw.treatment is not None and busbw.control is not None
    assert busbw.treatment < busbw.control and busbw.detail.startswith("worse: canary 10 node(s)")
    event = gate_event(decision, rollout_id="r-1", wave=0)  # type: ignore[arg-type]
    assert "canary-004" in event.offending_nodes
