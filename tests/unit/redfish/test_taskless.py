"""A 2xx answer without a task: one bound, from the BMC profile, for how long the inventory is
read back (``TaskPolicy.taskless_s``), where the client used to wait out the whole task
deadline (7,200 s) and the updater gave the node 120 s."""

from __future__ import annotations

import pytest

from lockstep_redfish.profile import TasklessMeaning, profile_named
from lockstep_redfish.tasks import TaskOutcome, TaskPolicy, TaskRef, wait_for_task
from lockstep_redfish.update import UpdatePolicy, policy_for, readback_window
from lockstep_updater.settings import Settings as UpdaterSettings
from tests.unit.redfish.fakes import ScriptedBmc


def _outcome(
    *, forgotten: bool = False, taskless: bool = False, waited_s: float = 0.0
) -> TaskOutcome:
    return TaskOutcome(
        None, None, (), 0, waited_s, 0.0, forgotten=forgotten or taskless, taskless=taskless
    )


async def test_an_answer_without_a_monitor_is_taskless_and_polls_nothing() -> None:
    bmc = ScriptedBmc()
    outcome = await wait_for_task(bmc, TaskRef(None), TaskPolicy())
    assert outcome.taskless and outcome.polls == 0 and bmc.requests == []


@pytest.mark.parametrize(
    ("profile_id", "meaning", "bound"),
    [
        ("nvidia-gb200-nvl", TasklessMeaning.WRITING, 900.0),
        ("supermicro-x13", TasklessMeaning.WRITING, 600.0),
        ("dmtf-generic", TasklessMeaning.DONE, 120.0),
    ],
)
def test_the_profile_sets_the_one_bound_for_a_taskless_answer(
    profile_id: str, meaning: TasklessMeaning, bound: float
) -> None:
    profile = profile_named(profile_id)
    policy = policy_for(profile)
    assert profile.taskless.meaning is meaning
    assert readback_window(_outcome(taskless=True), policy) == bound
    assert bound < policy.tasks.deadline_s  # not the 7,200 s task deadline any more


def test_a_task_forgotten_mid_flash_still_gets_the_rest_of_its_deadline() -> None:
    policy = UpdatePolicy()
    forgotten = _outcome(forgotten=True, waited_s=200.0)
    assert readback_window(forgotten, policy) == policy.tasks.deadline_s - 200.0
    assert readback_window(_outcome(), policy) == policy.settle_s  # a task that completed


def test_unset_the_client_and_the_updater_agree_on_the_taskless_bound() -> None:
    settle = UpdaterSettings.model_fields["verify_settle_s"].default
    assert TaskPolicy().taskless_s == settle


def test_a_taskless_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        TaskPolicy(taskless_s=0)
