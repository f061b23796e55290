"""Following a task monitor (DSP0266 "Asynchronous operations") with a scripted BMC and a
clock that moves only when the poller sleeps: every ending, and the waits between polls."""

from __future__ import annotations

import pytest

from lockstep_redfish.errors import (
    BmcRefused,
    BmcUnavailable,
    TaskDeadlineExceeded,
    TaskFailed,
    TaskUnreachable,
)
from lockstep_redfish.tasks import (
    TaskOutcome,
    TaskPolicy,
    TaskRef,
    follow_task,
    path_on_bmc,
    task_ref,
    wait_for_task,
)

from .fakes import BASE, FakeClock, ScriptedBmc, reply, task

pytestmark = pytest.mark.unit
MONITOR = "/redfish/v1/TaskService/TaskMonitors/1"
REF = TaskRef(MONITOR, "/redfish/v1/TaskService/Tasks/1")
POLICY = TaskPolicy(deadline_s=100, poll_s=5, min_poll_s=1, max_poll_s=30, unreachable_s=60)
DARK = BmcUnavailable("GET: connection failed (after 1 attempts)")


async def _wait(bmc: ScriptedBmc, clock: FakeClock, policy: TaskPolicy = POLICY) -> TaskOutcome:
    return await wait_for_task(bmc, REF, policy, clock=clock, sleep=clock.sleep)


async def test_polls_as_retry_after_asks_within_the_bounds_until_completed() -> None:
    bmc = ScriptedBmc(
        # The progress stands still here: only Retry-After and the bounds pace the polls.
        reply(202, task("Running", 10), Retry_After="12"),
        reply(202, task("Running", 10), Retry_After="0"),  # never faster than min_poll_s
        reply(202, task("Running", 10), Retry_After="600"),  # never slower than max_poll_s
        reply(202, task("Running", 10)),  # no header: poll_s
        reply(200, task("Completed", 100, ("Update.1.3.0.UpdateSuccessful", "Done."))),
    )
    clock = FakeClock()
    outcome = await _wait(bmc, clock)
    assert clock.slept == [12, 1, 30, 5]
    assert outcome.state == "Completed" and outcome.percent == 100 and outcome.polls == 5
    assert outcome.messages == ("Update.1.3.0.UpdateSuccessful: Done.",)
    assert outcome.waited_s == 48 and not outcome.forgotten
    assert {r[2]["retries"] for r in bmc.requests} == {0}  # the poll loop is the retry


async def test_a_long_task_is_read_less_often_until_its_pace_says_it_is_near_the_end() -> None:
    # PercentComplete moving at a steady pace: the next read comes after a third of the time
    # that pace says is left, never sooner than poll_s, never later than max_poll_s.
    bmc = ScriptedBmc(
        reply(202, task("Running", 0)),  # t=0: no pace yet
        reply(202, task("Running", 10)),  # t=5: 90% left at 2%/s, 45 s: a third is 15 s
        reply(202, task("Running", 40)),  # t=20: 30 s left: 10 s
        reply(202, task("Running", 60)),  # t=30: 20 s left: 6.7 s
        reply(202, task("Running", 95)),  # t=36.7: 1.9 s left: poll_s, 5 s
        reply(200, task("Completed", 100)),
    )
    clock = FakeClock()
    outcome = await _wait(bmc, clock)
    assert outcome.state == "Completed" and outcome.polls == 6
    assert [round(s, 2) for s in clock.slept] == [5, 15, 10, 6.67, 5]


async def test_a_slow_pace_never_waits_longer_than_max_poll_s() -> None:
    bmc = ScriptedBmc(
        reply(202, task("Running", 0)),
        reply(202, task("Running", 1)),  # 495 s left at this pace: capped at 30 s
        reply(200, task("Completed", 100)),
    )
    clock = FakeClock()
    await _wait(bmc, clock)
    assert clock.slept == [5, 30]


async def test_a_task_still_running_at_the_deadline_fails_and_is_left_alone() -> None:
    bmc = ScriptedBmc(*[reply(202, task("Running", 99), Retry_After="30")] * 5)
    clock = FakeClock()
    with pytest.raises(TaskDeadlineExceeded) as info:
        await _wait(bmc, clock)
    assert str(info.value) == (
        f"task {BASE}{MONITOR} still Running at 99% after the 100s deadline; "
        "left running (not cancelled)"
    )
    assert clock.slept == [30, 30, 30, 10]  # the last wait ends at the deadline
    assert [r[0] for r in bmc.requests] == ["GET"] * 5  # never a DELETE


async def test_a_task_followed_in_turns_gives_the_caller_back_while_it_runs() -> None:
    # The updater follows a quarter-hour staging task in turns, so that its worker serves
    # other nodes meanwhile: None after the hold, the outcome once the task ends.
    bmc = ScriptedBmc(
        reply(202, task("Running", 10)),
        reply(202, task("Running", 10)),
        reply(202, task("Running", 10)),
        reply(200, task("Completed", 100)),
    )
    clock = FakeClock()
    turn = await follow_task(bmc, REF, POLICY, hold_s=8, clock=clock, sleep=clock.sleep)
    assert turn is None and clock.slept == [5, 5]  # polled at 0, 5, 10: past the hold
    outcome = await follow_task(
        bmc, REF, POLICY, hold_s=8, waited_s=10, clock=clock, sleep=clock.sleep
    )
    assert outcome is not None and outcome.state == "Completed"
    assert outcome.waited_s == 10  # the earlier turn's 10 s count, the poll was at once


async def test_the_deadline_of_a_task_followed_in_turns_counts_from_the_first_turn() -> None:
    bmc = ScriptedBmc(*[reply(202, task("Running", 50))] * 5)
    clock = FakeClock()
    with pytest.raises(TaskDeadlineExceeded, match="after the 100s deadline"):
        await follow_task(bmc, REF, POLICY, hold_s=60, waited_s=95, clock=clock, sleep=clock.sleep)
    assert clock.slept == [5]  # 95 s were spent in earlier turns: 5 s of deadline were left


async def test_a_dark_bmc_is_waited_for_then_the_task_completes() -> None:
    bmc = ScriptedBmc(reply(202, task("Running")), DARK, DARK, DARK, reply(200, task("Completed")))
    clock = FakeClock()
    outcome = await _wait(bmc, clock)
    assert outcome.state == "Completed"
    assert outcome.longest_unreachable_s == 10


async def test_a_bmc_dark_past_the_bound_is_unreachable_never_pushed_again() -> None:
    bmc = ScriptedBmc(reply(202, task("Running")), *[DARK] * 20)
    clock = FakeClock()
    with pytest.raises(TaskUnreachable, match=r"not answered for 60s .*do not push again"):
        await _wait(bmc, clock)
    assert all(method == "GET" for method, _, _ in bmc.requests)


async def test_dark_at_the_deadline_is_unreachable_not_stuck() -> None:
    policy = TaskPolicy(deadline_s=20, poll_s=5, min_poll_s=1, unreachable_s=60)
    bmc = ScriptedBmc(reply(202, task("Running")), *[DARK] * 10)
    with pytest.raises(TaskUnreachable, match="did not answer by the deadline"):
        await _wait(bmc, FakeClock(), policy)


async def test_a_lost_session_is_opened_again_once() -> None:
    bmc = ScriptedBmc(reply(401), reply(202, task("Running")), reply(200, task("Completed")))
    outcome = await _wait(bmc, FakeClock())
    assert bmc.reopened == 1 and outcome.state == "Completed"
    again = ScriptedBmc(reply(401), reply(401))
    with pytest.raises(BmcRefused, match="401 right after a new login"):
        await _wait(again, FakeClock())


async def test_a_forgotten_task_leaves_the_verdict_to_the_readback() -> None:
    bmc = ScriptedBmc(reply(202, task("Running", 40)), DARK, reply(404))
    outcome = await _wait(bmc, FakeClock())
    assert outcome.forgotten and outcome.state is None
    no_monitor = await wait_for_task(ScriptedBmc(), TaskRef(None), POLICY)
    assert no_monitor.taskless and no_monitor.polls == 0


async def test_a_task_resource_used_as_monitor_answers_200_while_running() -> None:
    bmc = ScriptedBmc(reply(200, task("Running", 20)), reply(200, task("Completed", 100)))
    outcome = await _wait(bmc, FakeClock())
    assert outcome.state == "Completed" and outcome.polls == 2


async def test_a_final_answer_without_task_state_reads_the_task() -> None:
    bmc = ScriptedBmc(reply(204), reply(200, task("Completed")))
    outcome = await _wait(bmc, FakeClock())
    assert outcome.state == "Completed"
    assert [path for _, path, _ in bmc.requests] == [MONITOR, REF.task]


@pytest.mark.parametrize("state", ["Exception", "Cancelled", "Killed", "Interrupted", "Suspended"])
async def test_failure_states_fail_with_the_tasks_messages(state: str) -> None:
    failed = task(state, 60, ("Update.1.3.0.ApplyFailed", "Writing the image failed."))
    bmc = ScriptedBmc(reply(200, failed))
    with pytest.raises(TaskFailed) as info:
        await _wait(bmc, FakeClock())
    assert str(info.value) == (
        f"task {BASE}{MONITOR} ended {state}: Update.1.3.0.ApplyFailed: Writing the image failed."
    )


async def test_an_error_answer_of_the_monitor_fails_with_its_message() -> None:
    error = {
        "error": {
            "code": "Base.1.19.0.GeneralError",
            "message": "See ExtendedInfo.",
            "@Message.ExtendedInfo": [
                {"MessageId": "Update.1.3.0.VerificationFailed", "Message": "Bad signature."}
            ],
        }
    }
    with pytest.raises(TaskFailed, match=r"HTTP 400: Update.1.3.0.VerificationFailed: Bad sig"):
        await _wait(ScriptedBmc(reply(400, error)), FakeClock())


def test_task_refs_stay_on_the_bmc() -> None:
    accepted = reply(202, task("New"), Location=f"{BASE}{MONITOR}")
    assert task_ref(accepted, BASE) == REF
    assert task_ref(reply(204, None, Location=MONITOR), BASE) == TaskRef(MONITOR)
    assert task_ref(reply(202, task("New")), BASE) == TaskRef(REF.task, REF.task)
    assert path_on_bmc("https://elsewhere.example/redfish/v1/x", BASE) is None
    assert path_on_bmc("relative/path", BASE) is None


def test_policy_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="positive"):
        TaskPolicy(deadline_s=0)
    with pytest.raises(ValueError, match="max_poll_s"):
        TaskPolicy(min_poll_s=10, max_poll_s=5)
