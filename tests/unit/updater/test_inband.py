"""The in-band driver unit decided from the agent's reading (domain.inband), the GSP runbook's
policy (domain.remedy) and its guard (domain.guard.decide_remedy), and a rollout waiting for a
node a remedy holds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lockstep_common.events.v1 import DriftItem
from lockstep_common.vocabulary import Component, DriftKind, Severity
from lockstep_updater.domain.guard import Facts, RemedyFacts, Verdict, decide, decide_remedy
from lockstep_updater.domain.inband import AgentState, Call, fallback_for, next_call
from lockstep_updater.domain.remedy import Intake, RemedyPolicy, intake, remedy_id

pytestmark = pytest.mark.unit
OLD, NEW = "580.65.06", "580.95.05"
MISMATCH = AgentState(
    phase="gsp_mismatch",
    driver=NEW,
    loaded_module=NEW,
    gsp_firmware=OLD,
    firmware_dirs=(OLD,),
    dkms="built",
    cuda="13.0",
    nccl="2.27.7",
    fabric_manager=OLD,
    module_rejected=False,
    diag_passed=False,
)
BUILT = replace(MISMATCH, phase="dkms_built", firmware_dirs=(NEW,))
CLEAN = replace(MISMATCH, phase="ready", gsp_firmware=NEW, firmware_dirs=(NEW,), diag_passed=True)


@pytest.mark.parametrize(
    ("state", "sent", "call"),
    [
        (MISMATCH, {}, Call.INSTALL),  # seed 004: reinstall as one unit, even at that version
        (BUILT, {"install": True}, Call.REBOOT),
        (BUILT, {}, Call.REBOOT),  # installed by an earlier run that died: not reinstalled
        (replace(BUILT, phase="driver_installed"), {"install": True}, Call.REBUILD),
        (replace(BUILT, phase="dkms_failed"), {"install": True}, Call.REBUILD),
        (replace(BUILT, phase="dkms_failed"), {"install": True, "rebuild": True}, Call.FAILED),
        (replace(BUILT, phase="rebooting"), {"reboot": True}, Call.WAIT),
        (CLEAN, {"install": True, "reboot": True}, Call.VERIFIED),
        (CLEAN, {}, Call.VERIFIED),  # already aligned: nothing to write
        (MISMATCH, {"install": True, "reboot": True}, Call.FAILED),
        (MISMATCH, {"install": True}, Call.UNKNOWN),  # sent, nothing seen: never again
        (BUILT, {"install": True, "reboot": True}, Call.UNKNOWN),
        (replace(CLEAN, diag_passed=False), {"reboot": True}, Call.FAILED),
        (
            replace(MISMATCH, phase="module_rejected", module_rejected=True, loaded_module=None),
            {"install": True, "reboot": True},
            Call.SECURE_BOOT,
        ),
    ],
)
def test_the_next_call_follows_what_the_agent_reads(
    state: AgentState, sent: dict[str, bool], call: Call
) -> None:
    assert next_call(state, NEW, sent).call is call


def test_unknown_and_failed_say_why() -> None:
    assert "not sent again" in next_call(MISMATCH, NEW, {"install": True}).reason
    failed = next_call(MISMATCH, NEW, {"install": True, "reboot": True}).reason
    assert f"no /lib/firmware/nvidia/{NEW}/" in failed
    rejected = replace(MISMATCH, module_rejected=True)
    assert "Secure Boot" in next_call(rejected, NEW, {}).reason


def test_a_version_runs_only_with_its_own_gsp_firmware_and_a_passing_diagnostic() -> None:
    assert CLEAN.runs(NEW)
    assert not MISMATCH.runs(NEW)
    assert not replace(CLEAN, firmware_dirs=(OLD,)).runs(NEW)
    assert not replace(CLEAN, diag_passed=False).runs(NEW)


def test_the_previous_known_good_branch_is_the_other_firmware_directory() -> None:
    assert fallback_for(MISMATCH, NEW) == OLD
    assert fallback_for(replace(MISMATCH, firmware_dirs=(NEW,)), NEW) is None
    newest = replace(MISMATCH, firmware_dirs=("535.261.03", OLD, NEW))
    assert fallback_for(newest, NEW) == OLD
    # Realigning to the pin (OLD) of a node whose broken NEW is loaded: NEW has no firmware
    # directory, so it is no fallback.
    assert fallback_for(MISMATCH, OLD) is None


def item(
    kind: DriftKind, component: Component = Component.GPU_GSP, expected: str = NEW
) -> DriftItem:
    return DriftItem(
        component=component, expected=expected, actual=None, kind=kind, severity=Severity.CRITICAL
    )


@pytest.mark.parametrize(
    ("policy", "kinds", "expected"),
    [
        (RemedyPolicy.AUTOMATIC, [DriftKind.GSP_MISMATCH], Intake.RUN),
        (RemedyPolicy.APPROVAL, [DriftKind.GSP_MISMATCH], Intake.HOLD),
        (RemedyPolicy.OFF, [DriftKind.GSP_MISMATCH], Intake.IGNORE),
        (RemedyPolicy.AUTOMATIC, [DriftKind.UNEXPECTED, DriftKind.INCOMPATIBLE], Intake.IGNORE),
        (RemedyPolicy.AUTOMATIC, [DriftKind.UNEXPECTED, DriftKind.GSP_MISMATCH], Intake.RUN),
    ],
)
def test_the_policy_decides_what_a_drift_starts(
    policy: RemedyPolicy, kinds: list[DriftKind], expected: Intake
) -> None:
    assert intake(policy, [item(k) for k in kinds]).intake is expected


def test_the_pin_is_the_drifts_driver_expectation() -> None:
    items = [item(DriftKind.GSP_MISMATCH), item(DriftKind.UNEXPECTED, Component.DRIVER, OLD)]
    assert intake(RemedyPolicy.AUTOMATIC, items).pin == OLD
    assert intake(RemedyPolicy.AUTOMATIC, items[:1]).pin is None


def test_a_remedy_id_is_a_subject_token_and_never_a_rollouts() -> None:
    rid = remedy_id("0123456789abcdef0123456789abcdef")
    assert rid == "remedy-0123456789ab"


FREE = RemedyFacts(node_id="n1", pool="p", in_rollout=None, others_out=0, remedies_out=0)


@pytest.mark.parametrize(
    ("facts", "takes_out", "verdict", "why"),
    [
        (FREE, True, Verdict.PROCEED, ""),
        (replace(FREE, in_rollout="r-1"), False, Verdict.WAIT, "released wave of rollout r-1"),
        (replace(FREE, remedies_out=1, others_out=1), True, Verdict.WAIT, "one at a time"),
        (replace(FREE, remedies_out=1, others_out=1), False, Verdict.PROCEED, ""),
        (replace(FREE, others_out=1), True, Verdict.WAIT, "remedy budget 1"),
    ],
)
def test_a_remedy_waits_for_rollouts_other_remedies_and_the_pool(
    facts: RemedyFacts, takes_out: bool, verdict: Verdict, why: str
) -> None:
    decision = decide_remedy(facts, budget=1, takes_out_of_service=takes_out)
    assert decision.verdict is verdict and why in decision.reason


def test_a_larger_remedy_budget_admits_a_remedy_beside_a_rollouts_node() -> None:
    facts = replace(FREE, others_out=1)
    assert decide_remedy(facts, budget=2, takes_out_of_service=True).verdict is Verdict.PROCEED


def test_a_rollout_waits_for_a_node_a_remedy_holds_out_of_service() -> None:
    facts = Facts(
        node_id="n1",
        halted=None,
        wave_released=True,
        in_wave=True,
        in_plan=True,
        failures=0,
        failure_budget=0,
        pool="p",
        others_out=0,
        max_unavailable=2,
        busy_with="GSP remedy remedy-0123",
    )
    waiting = decide(facts, takes_out_of_service=True)
    assert waiting.verdict is Verdict.WAIT and "GSP remedy" in waiting.reason
    # Staging into the inactive bank does not take the node out: it may go on.
    assert decide(facts, takes_out_of_service=False).verdict is Verdict.PROCEED
