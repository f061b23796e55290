"""What the console is shown in tests and screenshots: a demo-like rollout whose canary tripped
the gate (the judge's real decision on ``tests/data/gate/busbw_regression.csv``), a rollout
whose wave is progressing, a canary tripped by hard rules (their real decision on a few nodes'
readings), and a 12,500-node fleet."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lockstep_common.events.v1 import (
    AuditEntry,
    Conformance,
    DriftedNode,
    DriftItem,
    FleetDriftAnswered,
    FleetStatusAnswered,
    FleetStragglersAnswered,
    GateShowAnswered,
    GateVerdictRecord,
    NodeHistoryAnswered,
    NodeQuarantinedAnswered,
    PlanStratum,
    PoolConformance,
    QuarantinedNode,
    RolloutAuditAnswered,
    RolloutState,
    RolloutWaveState,
    SharedVersion,
    StepEntry,
    Straggler,
    StragglersFlagged,
)
from lockstep_common.vocabulary import Component, DriftKind, GateVerdict, Severity
from lockstep_console.testing.memory_source import MemorySource
from lockstep_gate.hard_rules import check_hard_rules
from lockstep_gate.judge import decide, evaluate, trip_evidence
from lockstep_gate.policy_files import load_policy
from lockstep_gate.sample_files import read_samples
from lockstep_gate.samples import Group, Sample, SampleTable

GATE_DATA = Path(__file__).parents[2] / "data" / "gate"
T0 = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
TRIPPED = "r-tripped"
RUNNING = "r-running"
HARD_RULE = "r-hard-rule"
STACK = "a" * 64
FLEET_NODES = 12_500


def tripped_decision() -> dict[str, object]:
    table = read_samples(GATE_DATA / "busbw_regression.csv")
    policy = load_policy(GATE_DATA / "policy.toml")
    now = datetime.fromtimestamp(float(table.time.max()), UTC)
    return evaluate(table, policy, now=now).model_dump(mode="json")


def hard_rule_decision() -> dict[str, object]:
    """The hard rules' real decision on a canary of 4 nodes, one of which reported XID 79 and a
    failed DCGM diagnostic 30 s into its soak, another XID 79 20 s later."""
    t0 = T0.timestamp()
    rows = [
        Sample(f"{group.value}-{i:05d}", group, "heartbeat", float(k), t0 + 10 * k, "gb200")
        for group in (Group.CANARY, Group.CONTROL)
        for i in range(4)
        for k in range(8)
    ]
    rows += [
        Sample("canary-00002", Group.CANARY, "xid_79", 1.0, t0 + 30, "gb200"),
        Sample("canary-00002", Group.CANARY, "dcgm_diag_passed", 0.0, t0 + 30, "gb200"),
        Sample("canary-00003", Group.CANARY, "xid_79", 2.0, t0 + 50, "gb200"),
    ]
    policy = load_policy(GATE_DATA / "policy.toml")
    now = t0 + 70
    rules, notes = check_hard_rules(SampleTable.from_rows(rows), policy, now=now)
    decision = decide(policy, (), rules, notes=notes, evaluated_at=now)
    # The judge's comparison at the trip, as the healthgate keeps it: here the real judge on a
    # recorded busbw regression (the rules' rows carry no metric of the policy).
    table = read_samples(GATE_DATA / "busbw_regression.csv")
    evidence = trip_evidence(
        table, policy, now=float(table.time.max()), window_start=float(table.time.min())
    )
    return decision.model_copy(update={"at_trip": evidence}).model_dump(mode="json")


def wave(number: int, state: str, nodes: int, done: int, failed: int = 0) -> RolloutWaveState:
    return RolloutWaveState(
        number=number,
        state=state,
        nodes=nodes,
        components=("gpu_vbios", "bmc"),
        gate_passed=state == "passed",
        succeeded=done,
        failed=failed,
        released_at=T0 if state != "pending" else None,
        deadline=None,
        soak_until=T0 + timedelta(minutes=10) if state == "soaking" else None,
    )


STRATA = (
    PlanStratum(
        profile="gb200",
        supplier="acme",
        stack=STACK,
        canary=("gb200-r07-n03", "gb200-r11-n02"),
        canary_count=2,
        controls=("gb200-r07-n04", "gb200-r12-n01"),
        controls_count=2,
        size=36,
    ),
    # A large stratum: the planner names the first ids and counts them all.
    PlanStratum(
        profile="h100",
        supplier="globex",
        stack=STACK,
        canary=tuple(f"h100-r{i:02d}-n01" for i in range(4)),
        canary_count=40,
        controls=tuple(f"h100-r{i:02d}-n02" for i in range(4)),
        controls_count=40,
        size=4000,
    ),
)


def rollout(
    rid: str, state: str, waves: tuple[RolloutWaveState, ...], reason: str = ""
) -> RolloutState:
    done = sum(w.succeeded for w in waves)
    failed = sum(w.failed for w in waves)
    waiting = sum(w.nodes for w in waves) - done - failed
    return RolloutState(
        rollout_id=rid,
        intent_id=uuid.UUID(int=1),
        stack_hash=STACK,
        change_class="routine",
        dry_run=False,
        state=state,
        plan_hash="b" * 64,
        approvals=("alice",),
        approvals_needed=1,
        reason=reason,
        created_at=T0,
        updated_at=T0 + timedelta(minutes=5),
        deferred={"2": "fabric domain nvl72-a7 is occupied by cluster job 4411"},
        waves=waves,
        nodes_by_step={"verified": done, "failed": failed, "waiting": waiting},
        strata=STRATA,
    )


def running(done: int) -> RolloutState:
    return rollout(RUNNING, "running", (wave(0, "passed", 10, 10), wave(1, "released", 40, done)))


def fleet(nodes: int = FLEET_NODES) -> tuple[FleetStatusAnswered, FleetDriftAnswered]:
    """``nodes`` nodes in 250 (pool, profile) groups over 5 sites; the first drift page."""
    groups = []
    per = nodes // 250
    for i in range(250):
        drifted = i % 7
        groups.append(
            PoolConformance(
                pool=f"pool-{i // 5:02d}",
                profile=("gb200", "h100", "b200", "gb300", "h200")[i % 5],
                nodes=per,
                conforming=per - drifted - 1,
                drifted=drifted,
                unreadable=1,
                unobserved=0,
                conformance_ratio=(per - drifted - 1) / per,
            )
        )
    total = sum(g.nodes for g in groups)
    drifted = sum(g.drifted for g in groups)
    status = FleetStatusAnswered(
        fleet=Conformance(
            nodes=total,
            conforming=total - drifted - 250,
            drifted=drifted,
            unreadable=250,
            unobserved=0,
            conformance_ratio=(total - drifted - 250) / total,
        ),
        groups=tuple(groups),
        drifted_by_kind={DriftKind.PENDING: drifted - 40, DriftKind.GSP_MISMATCH: 40},
        sweep=None,
        sweep_running=False,
        last_finished_sweep=None,
    )
    page = FleetDriftAnswered(
        nodes=tuple(
            DriftedNode(
                node=f"node-{i:05d}",
                site=f"site-{i % 5}",
                pool=f"pool-{i % 50:02d}",
                profile="gb200",
                stack_hash=STACK,
                since=T0,
                items=(
                    DriftItem(
                        component=Component.GPU_VBIOS,
                        expected="97.00.01",
                        actual="96.00.90",
                        kind=DriftKind.PENDING if i % 9 else DriftKind.GSP_MISMATCH,
                        severity=Severity.WARNING if i % 9 else Severity.CRITICAL,
                        detail="",
                    ),
                ),
            )
            for i in range(100)
        ),
        next_after="node-00099",
    )
    return status, page


def stragglers() -> FleetStragglersAnswered:
    return FleetStragglersAnswered(
        findings=(
            StragglersFlagged(
                profile="gb200",
                evaluated_at=T0,
                window_s=3600,
                nodes=2500,
                stragglers=(
                    Straggler(
                        node_id="node-00042",
                        site="site-2",
                        metric="nccl_busbw_gbps",
                        value=301.0,
                        peer_median=377.0,
                        deviations=6.2,
                    ),
                ),
                shared_versions=(
                    SharedVersion(
                        component=Component.NIC,
                        version="28.39.1002",
                        stragglers_with=1,
                        stragglers=1,
                        peers_with=12,
                        peers=2499,
                        p_value=0.005,
                    ),
                ),
            ),
        )
    )


QUARANTINED = "canary-00003"


def history() -> NodeHistoryAnswered:
    """A canary node the bad image reached, flipped back, then quarantined."""

    def step(i: int, name: str, outcome: str, reason: str) -> StepEntry:
        return StepEntry(
            rollout_id=TRIPPED,
            wave=0,
            step=name,
            attempt=1,
            token=i,
            started_at=T0 + timedelta(minutes=i),
            ended_at=T0 + timedelta(minutes=i, seconds=40),
            outcome=outcome,
            reason=reason,
        )

    return NodeHistoryAnswered(
        steps=(
            step(1, "stage", "succeeded", ""),
            step(2, "activate", "succeeded", ""),
            step(3, "verify", "succeeded", "gpu_vbios 97.00.9A.00.01 read back"),
            step(13, "flip_back", "succeeded", "gate tripped: previous bank active again"),
            step(14, "verify", "quarantined", "XID 79 after the flip-back: node held"),
        )
    )


def held(node_id: str, reason: str) -> QuarantinedNode:
    return QuarantinedNode(
        node_id=node_id, rollout_id=TRIPPED, wave=0, since=T0 + timedelta(minutes=14), reason=reason
    )


HELD = {
    None: NodeQuarantinedAnswered(
        nodes=(held(QUARANTINED, "XID 79 after the flip-back: node held"),),
        next_after=QUARANTINED,
    ),
    QUARANTINED: NodeQuarantinedAnswered(
        nodes=(held("gb200-r09-n01", "verify failed twice: vbios not read back"),)
    ),
}
"""Two pages of the updater's ``node.quarantined`` answer."""


def source() -> MemorySource:
    """Everything the console is shown in the tests and the screenshots."""
    tripped = rollout(
        TRIPPED,
        "halted",
        (wave(0, "tripped", 10, 10), wave(1, "pending", 40, 0)),
        reason="gate tripped at the canary: critical metric nccl_busbw_gbps worse than control",
    )
    record = GateVerdictRecord(
        rollout_id=TRIPPED,
        wave=0,
        verdict=GateVerdict.TRIPPED,
        kind="judge",
        reason="critical metric nccl_busbw_gbps worse than control",
        window_start=T0,
        window_end=T0 + timedelta(minutes=10),
        policy_digest="c" * 64,
        event_id=uuid.UUID(int=2),
        decision=tripped_decision(),
    )
    audit = RolloutAuditAnswered(
        entries=(
            AuditEntry(at=T0, actor="planner", action="planned", detail="routine, 2 waves"),
            AuditEntry(at=T0, actor="alice", action="approved", detail="Ed25519 signature ok"),
            AuditEntry(
                at=T0 + timedelta(minutes=12),
                actor="healthgate",
                action="halted",
                detail="gate tripped at the canary",
            ),
            AuditEntry(
                at=T0 + timedelta(minutes=13),
                actor="updater",
                action="flipped back",
                detail="canary A/B banks flipped back to the previous image on 10 nodes",
            ),
        )
    )
    hard = record.model_copy(
        update={
            "rollout_id": HARD_RULE,
            "kind": "hard_rule",
            "window_end": T0 + timedelta(seconds=70),
            "decision": hard_rule_decision(),
        }
    )
    status, page = fleet()
    return MemorySource(
        rollout_states={TRIPPED: tripped, RUNNING: running(0)},
        audits={TRIPPED: audit},
        gates={
            TRIPPED: GateShowAnswered(verdicts=(record,)),
            HARD_RULE: GateShowAnswered(verdicts=(hard,)),
        },
        status=status,
        drift_pages={None: page},
        straggler_findings=stragglers(),
        histories={QUARANTINED: history()},
        quarantined_pages=dict(HELD),
    )
