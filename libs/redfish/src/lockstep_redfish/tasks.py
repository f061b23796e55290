"""Following a Redfish task to its end, with a deadline (DSP0266 "Asynchronous operations").

A long-running request answers 202 with ``Location`` (the task monitor) and optionally
``Retry-After``; GETs on the monitor answer 202 while the task runs and the operation's own
status once it is done (standards.md 1.2). Real BMCs bend this: some give the Task resource
as the monitor (200 with ``TaskState`` throughout), some answer 204 + ``Location``
(sushy-tools), and a BMC that reboots mid-task forgets its tasks (404) and its sessions (401).

:func:`wait_for_task` polls (:func:`follow_task` in turns), never faster than ``Retry-After``
asks (capped by ``TaskPolicy.max_poll_s``), and on a long task whose ``PercentComplete``
moves (DSP0268 ``Task``) at most every third of the time its pace says is left, until the
task ends or ``TaskPolicy.deadline_s`` passes:

- ``Completed`` -> a :class:`TaskOutcome`; so is a monitor that answers 404/410 after the task
  was accepted (``forgotten``: the BMC rebooted or expired the task), since the inventory, not
  the task, says whether the update happened (readback);
- a failure state (open-nvfwupd ``rf_target.py``: Exception, Cancelled, Cancelling, Killed,
  Interrupted, Stopping, Suspended) or an error status -> :class:`TaskFailed`;
- still running at the deadline -> :class:`TaskDeadlineExceeded` (the task is left alone);
- no answer for longer than ``TaskPolicy.unreachable_s`` -> :class:`TaskUnreachable`;
- 401: the session was lost with a reboot; one new login, then polling goes on;
- no monitor at all (a 2xx with neither ``Location`` nor a Task): a ``taskless`` outcome; what
  it means and how long the inventory is read back for it is the BMC profile's ``taskless``
  (``TaskPolicy.taskless_s``, the one bound ``update`` and the updater use for it).

Nothing here ever sends the update again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from lockstep_redfish.errors import (
    BmcRefused,
    BmcUnavailable,
    TaskDeadlineExceeded,
    TaskFailed,
    TaskUnreachable,
)
from lockstep_redfish.models import Task, error_text, parse
from lockstep_redfish.transport import Body, Reply, retry_after_seconds

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

COMPLETED = "Completed"
FAILED = frozenset(
    {"Exception", "Cancelled", "Cancelling", "Killed", "Interrupted", "Stopping", "Suspended"}
)
FINAL_STATUSES = frozenset({200, 201, 204})


class Requester(Protocol):
    """What polling needs of a session (:class:`~lockstep_redfish.session.BmcSession`)."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any] | None = None,
        data: Body | None = None,
        headers: dict[str, str] | None = None,
        retries: int | None = None,
        timeout_s: float | None = None,
    ) -> Reply: ...

    async def reopen(self) -> None: ...

    def url(self, path: str) -> str: ...


@dataclass(frozen=True, slots=True)
class TaskPolicy:
    """Bounds on following one task (seconds)."""

    deadline_s: float = 7200.0  # Ironic's firmware_update_overall_timeout default
    poll_s: float = 5.0  # without Retry-After (python-redfish-library's default)
    min_poll_s: float = 0.5  # even if Retry-After says 0
    max_poll_s: float = 60.0  # cap on Retry-After, so that a deadline is noticed
    unreachable_s: float = 900.0  # a rebooting BMC: reliability.md 7.D2 says 2-10 min
    # A 2xx without a task: read the inventory back for at most this long (the profile's
    # taskless.wait_s; the default is the updater's verify_settle_s, so both agree unset).
    taskless_s: float = 120.0

    def __post_init__(self) -> None:
        bounds = (self.deadline_s, self.poll_s, self.min_poll_s, self.unreachable_s)
        if min(*bounds, self.taskless_s) <= 0:
            raise ValueError("task policy bounds must be positive")
        if self.max_poll_s < self.min_poll_s:
            raise ValueError("max_poll_s must be >= min_poll_s")

    def delay(self, retry_after: float | None, remaining_s: float | None = None) -> float:
        """Seconds until the next poll: ``Retry-After`` when given, within the bounds; on a
        task whose progress says it has ``remaining_s`` to go, a third of that when longer
        (so a quarter-hour staging is read a dozen times, not every poll, and more often as
        it nears its end)."""
        wanted = self.poll_s if retry_after is None else retry_after
        if remaining_s is not None:
            wanted = max(wanted, remaining_s / 3)
        return min(max(wanted, self.min_poll_s), self.max_poll_s)


@dataclass(frozen=True, slots=True)
class TaskRef:
    """Where to follow an accepted operation: paths on the BMC, safe to persist.

    ``monitor`` is None when the BMC accepted without naming one (then only the inventory
    can tell); ``task`` is the Task resource when the answer named it.
    """

    monitor: str | None
    task: str | None = None


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How a task ended. ``state`` is None when the BMC no longer knows the task
    (``forgotten``) or answered without a ``TaskState``."""

    state: str | None
    percent: int | None
    messages: tuple[str, ...]
    polls: int
    waited_s: float
    longest_unreachable_s: float
    forgotten: bool = False
    taskless: bool = False  # accepted with no task to follow: only the inventory can tell


def path_on_bmc(location: str, base: str) -> str | None:
    """``location`` (absolute or a path) as a path on the BMC at ``base``; None if it points
    at another host (a task monitor elsewhere is never followed with our token)."""
    parts = urlsplit(location)
    if parts.scheme or parts.netloc:
        if not location.startswith(base.rstrip("/") + "/"):
            return None
        location = location[len(base.rstrip("/")) :]
        parts = urlsplit(location)
    if not parts.path.startswith("/"):
        return None
    return parts.path + (f"?{parts.query}" if parts.query else "")


def task_ref(reply: Reply, base: str) -> TaskRef:
    """The :class:`TaskRef` of a 202 (or 204 + ``Location``) answer."""
    location = reply.headers.get("Location")
    monitor = path_on_bmc(location, base) if location else None
    task = None
    if isinstance(reply.body, dict) and isinstance(reply.body.get("@odata.id"), str):
        task = path_on_bmc(reply.body["@odata.id"], base)
    return TaskRef(monitor=monitor or task, task=task)


def _messages(task: Task | None) -> tuple[str, ...]:
    if task is None:
        return ()
    return tuple(f"{m.MessageId or '-'}: {m.Message or ''}".rstrip(": ") for m in task.Messages)


class _Watch:
    """One task being followed: the state of the loop in :func:`wait_for_task`."""

    def __init__(self, bmc: Requester, ref: TaskRef, policy: TaskPolicy, clock: Clock) -> None:
        self.bmc, self.ref, self.policy, self.clock = bmc, ref, policy, clock
        self.started = clock()
        self.polls = 0
        self.task: Task | None = None
        self.progress_from: tuple[float, int] | None = None  # first (time, percent) read
        self.dark_since: float | None = None
        self.longest_dark = 0.0
        self.url = bmc.url(ref.monitor or ref.task or "")

    def outcome(self, *, forgotten: bool = False, taskless: bool = False) -> TaskOutcome:
        task = self.task
        return TaskOutcome(
            state=None if forgotten or task is None else task.TaskState,
            percent=task.PercentComplete if task else None,
            messages=_messages(task),
            polls=self.polls,
            waited_s=self.clock() - self.started,
            longest_unreachable_s=self.longest_dark,
            forgotten=forgotten or taskless,
            taskless=taskless,
        )

    def remaining_s(self) -> float | None:
        """How long the running task has to go at the pace its ``PercentComplete`` moved
        since it was first read; None before it moved (or without one)."""
        percent = self.task.PercentComplete if self.task else None
        if percent is None:
            return None
        now = self.clock()
        if self.progress_from is None:
            self.progress_from = (now, percent)
            return None
        since, first = self.progress_from
        if not first < percent < 100 or now <= since:
            return None
        return (100 - percent) * (now - since) / (percent - first)

    def dark(self, problem: str) -> None:
        now = self.clock()
        self.dark_since = now if self.dark_since is None else self.dark_since
        self.longest_dark = max(self.longest_dark, now - self.dark_since)
        if now - self.dark_since >= self.policy.unreachable_s:
            raise TaskUnreachable(
                f"task {self.url}: the BMC has not answered for {now - self.dark_since:.0f}s "
                f"({problem}); the update was accepted: wait and verify, do not push again",
                url=self.url,
            )

    def judge(self, task: Task) -> TaskOutcome | None:
        """The outcome of a finished task; None while it runs; raises for a failed one."""
        self.task = task
        if task.TaskState == COMPLETED:
            return self.outcome()
        if task.TaskState in FAILED:
            detail = "; ".join(_messages(task)[-3:]) or "no messages"
            raise TaskFailed(f"task {self.url} ended {task.TaskState}: {detail}", url=self.url)
        return None

    def late(self) -> TaskDeadlineExceeded | TaskUnreachable:
        limit = self.policy.deadline_s
        if self.dark_since is not None:
            return TaskUnreachable(
                f"task {self.url}: the BMC did not answer by the deadline ({limit:g}s); "
                "the update was accepted: wait and verify, do not push again",
                url=self.url,
            )
        task = self.task
        state = task.TaskState if task and task.TaskState else "unknown"
        percent = (
            f" at {task.PercentComplete}%" if task and task.PercentComplete is not None else ""
        )
        return TaskDeadlineExceeded(
            f"task {self.url} still {state}{percent} after the {limit:g}s deadline; "
            "left running (not cancelled)",
            url=self.url,
        )


async def _final(watch: _Watch, reply: Reply) -> TaskOutcome | None:
    """A 200/201/204 from the monitor: the operation's own answer, or a Task resource used
    as the monitor (still running)."""
    body = reply.body
    if isinstance(body, dict) and "TaskState" in body:
        return watch.judge(parse(Task, body, watch.url))
    if watch.ref.task is not None and watch.ref.task != watch.ref.monitor:
        try:
            task_reply = await watch.bmc.request("GET", watch.ref.task, retries=0)
        except BmcUnavailable:
            return watch.outcome()
        if task_reply.status == 200 and isinstance(task_reply.body, dict):
            return watch.judge(parse(Task, task_reply.body, watch.bmc.url(watch.ref.task)))
    return watch.outcome()  # finished synchronously, state unknown: the readback decides


async def _answer(watch: _Watch, reply: Reply) -> TaskOutcome | None:
    """What one answer of the monitor (not 401) says: an outcome, or None while it runs."""
    watch.dark_since = None
    if reply.status in {404, 410}:
        return watch.outcome(forgotten=True)
    if reply.status == 202:
        if isinstance(reply.body, dict) and "TaskState" in reply.body:
            watch.task = parse(Task, reply.body, watch.url)
        return None
    if reply.status in FINAL_STATUSES:
        return await _final(watch, reply)
    detail = error_text(reply.body) or "no error body"
    raise TaskFailed(f"task {watch.url} failed: HTTP {reply.status}: {detail}", url=watch.url)


async def wait_for_task(
    bmc: Requester,
    ref: TaskRef,
    policy: TaskPolicy,
    *,
    clock: Clock = time.monotonic,
    sleep: Sleep = asyncio.sleep,
) -> TaskOutcome:
    """Poll ``ref`` until its task ends; see the module docstring for every ending."""
    outcome = await follow_task(bmc, ref, policy, clock=clock, sleep=sleep)
    assert outcome is not None  # noqa: S101 - without a hold, only an ending returns
    return outcome


async def follow_task(
    bmc: Requester,
    ref: TaskRef,
    policy: TaskPolicy,
    *,
    hold_s: float | None = None,
    waited_s: float = 0.0,
    clock: Clock = time.monotonic,
    sleep: Sleep = asyncio.sleep,
) -> TaskOutcome | None:
    """As :func:`wait_for_task`, for a caller that follows a long task in turns (the updater
    gives its worker back while a BMC stages an image for a quarter of an hour): None when
    the task still runs after ``hold_s``. ``waited_s`` is how long earlier turns followed it,
    so the deadline counts from the first turn; an outcome's ``waited_s`` includes them. A
    BMC's silence is judged within one turn (``unreachable_s``) and by the deadline."""
    watch = _Watch(bmc, ref, policy, clock)
    watch.started -= waited_s
    path = ref.monitor or ref.task
    if path is None:
        return watch.outcome(taskless=True)  # accepted without a monitor: readback decides
    deadline = watch.started + policy.deadline_s
    turn_ends = None if hold_s is None else clock() + hold_s
    relogged = False  # one new login per 401; a 401 right after it is a refusal
    while True:
        hint: float | None = None
        remaining: float | None = None
        watch.polls += 1
        try:
            reply = await bmc.request("GET", path, retries=0)
            hint = retry_after_seconds(reply.headers.get("Retry-After"))
            if reply.status == 401:  # the BMC forgot our session (it rebooted): log in again
                if relogged:
                    raise BmcRefused(f"GET {watch.url}: HTTP 401 right after a new login")
                await bmc.reopen()
                relogged = True
                continue
            relogged = False
            done = await _answer(watch, reply)
            if done is not None:
                return done
            remaining = watch.remaining_s()
        except BmcUnavailable as exc:
            hint = exc.retry_after
            watch.dark(str(exc))
        now = clock()
        if now >= deadline:
            raise watch.late()
        if turn_ends is not None and now >= turn_ends:
            return None  # still running: the caller comes back for it
        await sleep(min(policy.delay(hint, remaining), deadline - now))
