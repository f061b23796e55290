"""One valid example of every event in the catalogue.

Used as the examples of the generated AsyncAPI document, by the round-trip tests, and by
``lockstep demo``. Kept beside the models so that adding an event without an example fails the
tests (``test_every_event_has_a_sample``).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from lockstep_common.envelope import EventData
from lockstep_common.events import v1
from lockstep_common.vocabulary import (
    ChangeClass,
    CheckResult,
    Component,
    DriftKind,
    GateVerdict,
    ObservationSource,
    RollbackMechanism,
    Severity,
)

_AT = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
_HASH = "9f2c" + "0" * 56 + "beef"
_ROLL = "r-2026-11-21-a"
_SCOPE = v1.ScopeSelector(sites=("iad1",), pools=("train-a",))
_CHECK = v1.CheckVerdict(
    check="image_digest", result=CheckResult.PASS, reason="sha384 matches", duration_ms=812.5
)
_BUNDLE = v1.BundleSummary(
    job_id=12,
    bundle_uri="/srv/bundles/gb200-2026.11",
    submitted_by="cli",
    submitted_at=_AT,
    state="attested",
    bundle_id="gb200-golden",
    bundle_version="2026.11.1",
    stack_hash=_HASH,
)
_EVIDENCE = v1.MetricEvidence(
    metric="nccl_busbw_ratio", treatment=0.97, control=0.98, p_value=0.41, passed=True
)
_DEVICE: dict[str, Any] = {
    "rollout_id": _ROLL,
    "node_id": "gb200-r07-n03",
    "component": Component.GPU_VBIOS,
    "from_version": "97.00.9A.00.01",
    "to_version": "97.00.A1.00.02",
    "duration_s": 912.0,
}
_GATE: dict[str, Any] = {"rollout_id": _ROLL, "wave": 0, "evidence": (_EVIDENCE,)}


def samples() -> list[EventData]:
    """One instance per event class, in catalogue order."""
    return [
        v1.BundleSubmitted(bundle_uri="file:///srv/bundles/gb200-2026.11.tar", submitted_by="ci"),
        v1.BundleAttested(
            bundle_id="gb200-golden", bundle_version="2026.11.1", stack_hash=_HASH, checks=(_CHECK,)
        ),
        v1.BundleRejected(bundle_uri="file:///srv/bundles/bad.tar", checks=(_CHECK,)),
        v1.IntentSubmitted(
            intent_id=uuid.UUID(int=1),
            stack_hash=_HASH,
            scope=_SCOPE,
            change_class=ChangeClass.ROUTINE,
            submitted_by="planner@example.org",
        ),
        v1.RolloutPlanned(
            rollout_id=_ROLL,
            intent_id=uuid.UUID(int=1),
            stack_hash=_HASH,
            change_class=ChangeClass.ROUTINE,
            waves=(v1.WavePlan(number=0, node_ids=("gb200-r07-n03",)),),
        ),
        v1.RolloutHalted(rollout_id=_ROLL, wave=1, reason="gate tripped: xid 79", halted_by="gate"),
        v1.RolloutCompleted(rollout_id=_ROLL, nodes_updated=255, nodes_failed=1),
        v1.WavePlanned(
            rollout_id=_ROLL,
            wave=0,
            node_ids=("gb200-r07-n03",),
            components=(Component.BMC, Component.GPU_VBIOS),
            max_unavailable=1,
            failure_budget=0,
            soak_seconds=3600,
            strata=(
                v1.WaveStratum(
                    key="gb200/acme/3f1c2a",
                    node_ids=("gb200-r07-n03",),
                    control_ids=("gb200-r09-n11",),
                ),
            ),
        ),
        v1.WaveCompleted(rollout_id=_ROLL, wave=0, succeeded=("gb200-r07-n03",), failed=()),
        v1.PinChanged(
            site="iad1",
            scope=_SCOPE,
            stack_hash=_HASH,
            stack={"gb200": {Component.DRIVER: "580.95.05", Component.GPU_GSP: "580.95.05"}},
        ),
        v1.MaintenanceWindowsRequested(
            scope="pool",
            name="train-a",
            timezone="Europe/Berlin",
            windows=("sat,sun 22:00-06:00",),
            requested_by="alice",
        ),
        v1.MaintenanceWindowsChanged(
            scope="pool",
            name="train-a",
            timezone="Europe/Berlin",
            windows=("sat,sun 22:00-06:00",),
            set_by="alice",
            set_at=_AT,
        ),
        v1.DeviceStaged(**_DEVICE),
        v1.DeviceActivated(**_DEVICE),
        v1.DeviceVerified(**_DEVICE),
        v1.DeviceFailed(**_DEVICE, step="activate", reason="task stuck at 40% for 30 min"),
        v1.DeviceRolledBack(
            **_DEVICE,
            reason="health degraded after activation",
            mechanism=RollbackMechanism.INACTIVE_IMAGE,
        ),
        v1.GatePassed(**_GATE, verdict=GateVerdict.PASSED),
        v1.GateTripped(**_GATE, verdict=GateVerdict.TRIPPED, offending_nodes=("gb200-r07-n03",)),
        v1.GateInconclusive(**_GATE, verdict=GateVerdict.INCONCLUSIVE),
        v1.InventoryObserved(
            node_id="gb200-r07-n03",
            site="iad1",
            source=ObservationSource.REDFISH,
            observed_at=_AT,
            sequence=42,
            components={Component.BMC: "25.06-2_NV_WW_01"},
            members={"HGX_FW_BMC_0": "25.06-2_NV_WW_01"},
        ),
        v1.HealthObserved(
            node_id="gb200-r07-n03",
            site="iad1",
            observed_at=_AT,
            dcgm_level=2,
            dcgm_passed=True,
            xid_counts={"79": 0},
            nccl_busbw_gbps=352.0,
            nccl_expected_gbps=360.0,
        ),
        v1.DriftDetected(
            node_id="gb200-r07-n03",
            site="iad1",
            stack_hash=_HASH,
            items=(
                v1.DriftItem(
                    component=Component.GPU_GSP,
                    expected="580.95.05",
                    actual="570.133.20",
                    kind=DriftKind.GSP_MISMATCH,
                    severity=Severity.CRITICAL,
                    detail="/lib/firmware/nvidia/580.95.05 missing",
                ),
            ),
        ),
        v1.DriftResolved(node_id="gb200-r07-n03", site="iad1", stack_hash=_HASH),
        v1.StragglersFlagged(
            profile="gb200",
            evaluated_at=_AT,
            window_s=1800,
            nodes=256,
            stragglers=(
                v1.Straggler(
                    node_id="gb200-r07-n03",
                    site="iad1",
                    metric="nccl_busbw_gbps",
                    value=318.0,
                    peer_median=402.5,
                    deviations=9.4,
                ),
            ),
            shared_versions=(
                v1.SharedVersion(
                    component=Component.NIC,
                    version="28.39.1002",
                    stragglers_with=1,
                    stragglers=1,
                    peers_with=0,
                    peers=255,
                    p_value=0.0039,
                ),
            ),
        ),
        v1.AdmissionCheckRequested(stack_hash=_HASH, node_ids=("gb200-r07-n03",)),
        v1.AdmissionCheckAnswered(
            stack_hash=_HASH,
            nodes=(
                v1.NodeAdmission(node_id="gb200-r07-n03", admitted=False, reasons=("gsp drift",)),
            ),
        ),
        v1.FleetQueryRequested(scope=_SCOPE, limit=250),
        v1.FleetQueryAnswered(
            nodes=(
                v1.FleetNode(
                    node_id="gb200-r07-n03",
                    site="iad1",
                    profile="gb200",
                    supplier="acme",
                    rack="r07",
                    pool="train-a",
                    fabric_domain="nvl72-07",
                    power_side="A",
                    bmc_url="https://10.7.3.1",
                    credentials="env:IAD1_BMC",
                    readable=True,
                    observed={Component.DRIVER: "580.95.05", Component.GPU_GSP: "580.95.05"},
                ),
            ),
            next_after="gb200-r07-n03",
        ),
        v1.FleetChanged(nodes=(v1.NodeVersion(node_id="gb200-r07-n03", version=4711),)),
        *_operator_samples(),
        v1.NodeCommandRequested(
            site="iad1",
            node_id="gb200-r07-n03",
            command_id="wi-4711-install-driver",
            action="install-driver",
            work_item="wi-4711",
            fencing_token=12,
            package="nvidia-driver-580-open",
            version="580.65.06-0ubuntu1",
            package_sha256="3b4c" * 16,
        ),
        v1.NodeCommandAnswered(
            command_id="wi-4711-install-driver",
            status="done",
            ran=(
                ("apt-get", "download", "nvidia-driver-580-open=580.65.06-0ubuntu1"),
                ("apt-get", "install", "-y", "--no-install-recommends", "./nvidia-driver.deb"),
            ),
        ),
    ]


_NODE = v1.RegisteredNode(
    id="gb200-r07-n03",
    bmc_url="https://10.7.3.1",
    profile="gb200",
    supplier="acme",
    site="iad1",
    rack="r07",
    fabric_domain="nvl72-07",
    pool="train-a",
    credentials="env:IAD1_BMC",
    power_side="A",
)
_DRIFT_ITEM = v1.DriftItem(
    component=Component.GPU_GSP,
    expected="580.95.05",
    actual="570.86.10",
    kind=DriftKind.UNEXPECTED,
    severity=Severity.CRITICAL,
)
_COUNTS: dict[str, Any] = {
    "nodes": 72,
    "conforming": 70,
    "drifted": 1,
    "unreadable": 1,
    "unobserved": 0,
    "conformance_ratio": 0.972222,
}


def _operator_samples() -> list[EventData]:
    """The operator commands' requests and answers (``lockstep_common.operator``)."""
    sweep = v1.SweepState(
        id=41,
        started_at=_AT,
        finished_at=_AT,
        seconds=38.5,
        total=72,
        done=72,
        unreadable=1,
    )
    return [
        v1.OpsRefused(
            command="fleet.remove",
            kind="forbidden",
            reason="identity 'reader' may only read: fleet.remove changes the fleet (run it as "
            "'cli')",
        ),
        v1.FleetListRequested(after="gb200-r07-n02", limit=500),
        v1.FleetListAnswered(nodes=(_NODE,), next_after=None),
        v1.FleetStatusRequested(),
        v1.FleetStatusAnswered(
            fleet=v1.Conformance(**_COUNTS),
            groups=(v1.PoolConformance(pool="train-a", profile="gb200", **_COUNTS),),
            drifted_by_kind={DriftKind.UNEXPECTED: 1},
            sweep=sweep,
            sweep_running=False,
            last_finished_sweep=sweep,
        ),
        v1.FleetShowRequested(node_id="gb200-r07-n03"),
        v1.FleetShowAnswered(
            node=_NODE,
            observations=(
                v1.NodeObservation(
                    source=ObservationSource.AGENT,
                    readable=True,
                    observed_at=_AT,
                    sequence=1207,
                    components={Component.GPU_GSP: "570.86.10"},
                    loaded_module="nvidia 570.86.10",
                ),
            ),
            pin_stack_hash=_HASH,
            drift=v1.DriftState(
                stack_hash=_HASH, since=_AT, evaluated_at=_AT, items=(_DRIFT_ITEM,)
            ),
            history=(
                v1.HistoryEntry(
                    source=ObservationSource.AGENT,
                    item="gsp",
                    old="580.95.05",
                    new="570.86.10",
                    observed_at=_AT,
                ),
            ),
        ),
        v1.FleetDriftRequested(include_informational=False, limit=100),
        v1.FleetDriftAnswered(
            nodes=(
                v1.DriftedNode(
                    node="gb200-r07-n03",
                    site="iad1",
                    pool="train-a",
                    profile="gb200",
                    stack_hash=_HASH,
                    since=_AT,
                    items=(_DRIFT_ITEM,),
                ),
            ),
        ),
        v1.FleetRemoveRequested(node_ids=("gb200-r07-n03",)),
        v1.FleetRemoveAnswered(removed=("gb200-r07-n03",)),
        v1.FleetImportRequested(
            import_id=uuid.UUID("6f1c2d3e-4b5a-4c6d-8e7f-8091a2b3c4d5"),
            chunk=0,
            chunks=1,
            nodes=(
                v1.RegisteredNode(
                    id="gb200-r07-n03",
                    bmc_url="https://10.7.0.3",
                    profile="gb200",
                    site="iad1",
                    pool="train-a",
                    credentials="file:/etc/lockstep/bmc.json",
                ),
            ),
        ),
        v1.FleetImportAnswered(
            import_id=uuid.UUID("6f1c2d3e-4b5a-4c6d-8e7f-8091a2b3c4d5"),
            staged=1,
            chunks=1,
            committed=True,
            nodes=1,
            added=1,
        ),
        v1.FleetSweepRequested(node_ids=("gb200-r07-n03",)),
        v1.FleetSweepAnswered(
            sweep=v1.SweepState(
                id=42,
                started_at=_AT,
                finished_at=_AT,
                seconds=1.5,
                total=1,
                done=1,
                unreadable=1,
            ),
        ),
        v1.FleetSweptRequested(sweep_id=42),
        v1.FleetSweptAnswered(
            nodes=(v1.SweptNode(id="gb200-r07-n03", readable=False, error="timed out after 10s"),),
        ),
        v1.DlqListRequested(limit=50),
        v1.DlqListAnswered(letters=(_LETTER,)),
        v1.DlqShowRequested(id=7),
        v1.DlqShowAnswered(letter=_LETTER, payload='{"type": "lockstep.bundle.submitted"}'),
        v1.DlqPurgeRequested(ids=(7,)),
        v1.DlqPurgeAnswered(purged=(7,)),
        v1.BundleSubmitRequested(bundle_uri="/srv/bundles/gb200-2026.11", note="release 11"),
        v1.BundleSubmitAnswered(job_id=12, bundle_uri="/srv/bundles/gb200-2026.11"),
        v1.BundleListRequested(limit=50),
        v1.BundleListAnswered(bundles=(_BUNDLE,)),
        v1.BundleShowRequested(job_id=12),
        v1.BundleShowAnswered(bundle=_BUNDLE, checks=(_CHECK,)),
        v1.NodeHistoryRequested(node_id="gb200-r07-n03", limit=200),
        v1.NodeHistoryAnswered(
            steps=(
                v1.StepEntry(
                    rollout_id=_ROLL,
                    wave=1,
                    step="activating",
                    attempt=1,
                    token=3,
                    started_at=_AT,
                    ended_at=_AT,
                    outcome="ok",
                    reason="",
                ),
            )
        ),
        v1.NodeReleaseRequested(
            node_id="gb200-r07-n03", reason="PSU replaced, diag passed", operator="jdoe"
        ),
        v1.NodeReleaseAnswered(release_id="release-0c1f9a2b3d4e"),
        v1.NodeQuarantinedRequested(after="gb200-r07-n02", limit=100),
        v1.NodeQuarantinedAnswered(
            nodes=(
                v1.QuarantinedNode(
                    node_id="gb200-r07-n03",
                    rollout_id=_ROLL,
                    wave=0,
                    since=_AT,
                    reason="verify failed twice: driver 570.86 not reported after flash",
                ),
            ),
            next_after=None,
        ),
        v1.NodeApproveRemedyRequested(node_id="gb200-r07-n03"),
        v1.NodeApproveRemedyAnswered(node_id="gb200-r07-n03"),
        v1.GateShowRequested(rollout_id=_ROLL, wave=0),
        v1.GateShowAnswered(
            verdicts=(
                v1.GateVerdictRecord(
                    rollout_id=_ROLL,
                    wave=0,
                    verdict=GateVerdict.TRIPPED,
                    kind="hard_rule",
                    reason="XID 79 on gb200-r07-n03",
                    window_start=_AT,
                    window_end=_AT,
                    policy_digest="0" * 64,
                    event_id=uuid.UUID(int=7),
                    decision={"verdict": "tripped", "offending_nodes": ["gb200-r07-n03"]},
                ),
            )
        ),
        v1.FleetStragglersRequested(),
        v1.FleetStragglersAnswered(findings=()),
        v1.RolloutStatusRequested(rollout_id=_ROLL),
        v1.RolloutStatusAnswered(
            rollout=v1.RolloutState(
                rollout_id=_ROLL,
                intent_id=uuid.UUID(int=1),
                stack_hash=_HASH,
                change_class="standard",
                dry_run=False,
                state="running",
                plan_hash="0" * 64,
                approvals=(),
                approvals_needed=0,
                reason="",
                created_at=_AT,
                updated_at=_AT,
                deferred={},
                waves=(
                    v1.RolloutWaveState(
                        number=0,
                        state="released",
                        nodes=5,
                        components=("gpu_vbios",),
                        gate_passed=False,
                        succeeded=2,
                        failed=0,
                        released_at=_AT,
                        deadline=_AT,
                        soak_until=None,
                    ),
                ),
                nodes_by_step={"activated": 2, "waiting": 3},
            )
        ),
        v1.RolloutAuditRequested(rollout_id=_ROLL),
        v1.RolloutAuditAnswered(
            entries=(v1.AuditEntry(at=_AT, actor="alice", action="paused", detail="change freeze"),)
        ),
        v1.PoolShowRequested(scope="pool", name="train-a"),
        v1.PoolShowAnswered(
            windows=(
                v1.PoolWindows(
                    scope="pool",
                    name="train-a",
                    timezone="Europe/Berlin",
                    windows=("sat,sun 22:00-06:00",),
                    set_by="alice",
                    set_at=_AT,
                ),
            ),
            history=(
                v1.AuditEntry(
                    at=_AT, actor="alice", action="windows set", detail="sat,sun 22:00-06:00"
                ),
            ),
        ),
        v1.FabricListRequested(),
        v1.FabricListAnswered(domains=(_DOMAIN,)),
        v1.FabricShowRequested(domain="nvl72-07"),
        v1.FabricShowAnswered(
            domain=_DOMAIN,
            history=(v1.AuditEntry(at=_AT, actor="inventory", action="discovered", detail=""),),
        ),
        v1.FleetGoldenRequested(node_id="gb200-r07-n03"),
        v1.FleetGoldenAnswered(stack={"gb200": {Component.GPU_GSP: "580.95.05"}}),
        v1.RolloutControlRequested(
            rollout_id=_ROLL, action="pause", by="alice", reason="change freeze"
        ),
        v1.RolloutControlAnswered(command_id=12, outcome="done"),
        v1.FabricPinRequested(domain="nvl72-07", bundle="gb200-fabric@1.20.3", by="bob"),
        v1.FabricPinAnswered(command_id=13, stack_hash=_HASH, outcome="done"),
        v1.RolloutPlanRequested(ask=_ASK, offset=0),
        v1.RolloutPlanAnswered(plan=_PLAN, nodes=("gb200-r07-n03", "gb200-r07-n04"), places=(0, 1)),
        v1.RolloutStartRequested(ask=_ASK, approval_ref="CAB-2026-1207", by="alice"),
        v1.RolloutStartAnswered(
            intent_id=uuid.UUID("5b1a4d0e-8c7f-4f4b-9a51-2f0c6a1d7e10"),
            rollout_id=_ROLL,
            decision="planned",
            state="planned",
            approvals_needed=1,
            plan=_PLAN,
        ),
        v1.RolloutListRequested(state="running"),
        v1.RolloutListAnswered(
            rollouts=(
                v1.RolloutListed(
                    rollout_id=_ROLL,
                    state="running",
                    change_class="routine",
                    bundle="gb200-driver@2026.03",
                    nodes=256,
                    approvals=1,
                    approvals_needed=1,
                    created_at=_AT,
                    updated_at=_AT,
                    reason="",
                ),
            )
        ),
    ]


_ASK = v1.PlanAsk(
    bundle="gb200-driver@2026.03",
    scope=v1.ScopeSelector(sites=("site-ams1",)),
    change_class=ChangeClass.ROUTINE,
)
_PLAN = v1.PlanSummary(
    plan_hash=_HASH,
    ask=v1.PlanAsk(stack_hash=_HASH, change_class=ChangeClass.ROUTINE),
    bundle="gb200-driver@2026.03",
    starts_at=_AT,
    makespan_s=7200,
    lower_bound_s=5400,
    waves=(
        v1.PlanWaveSummary(
            number=0, nodes=1, components=("driver",), failure_budget=0, start_s=0, end_s=1800
        ),
        v1.PlanWaveSummary(
            number=1, nodes=1, components=("driver",), failure_budget=0, start_s=1800, end_s=7200
        ),
    ),
    deferred=(),
    strata=(
        v1.PlanStratum(
            profile="gb200",
            supplier="acme",
            stack=_HASH,
            canary=("gb200-r07-n03",),
            canary_count=1,
            controls=("gb200-r07-n04",),
            controls_count=1,
        ),
    ),
    excluded=(),
    nodes=2,
)


_DOMAIN = v1.FabricDomainState(
    domain="nvl72-07",
    current="gb200-fabric@1.20.3",
    current_stack_hash=_HASH,
    target="gb200-fabric@1.20.3",
    target_stack_hash=_HASH,
    lifecycle="AVAILABLE",
    update_state="NO_UPDATE",
    update_reason="runs its target",
    recycle_level="FULL_RECYCLE",
    rollout_id=None,
    nodes=("gb200-r07-n03",),
    changed_by="planner",
    changed_at=_AT,
)


_LETTER = v1.DeadLetterEntry(
    id=7,
    failed_at=_AT,
    consumer="lockstep-attest-bundles",
    stream="LOCKSTEP_BUNDLES",
    stream_seq=1207,
    subject="bundle.submitted",
    error_kind="InvalidMessage",
    deliveries=1,
    reason="unknown schema version 7 of lockstep.bundle.submitted",
)
