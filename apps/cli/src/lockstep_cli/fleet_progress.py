"""Progress of a sweep on a terminal: this process's own sweep, or one another process runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

if TYPE_CHECKING:
    from lockstep_common.events.v1 import FleetStatusAnswered

POLL_S = 0.2  # how often --watch asks again: cheap, and smooth enough to watch
SWEEP_POLL_S = 1.0  # a bar beside a sweep asks less often: each answer counts the whole fleet
T = TypeVar("T")


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


@contextmanager
def bar(
    console: Console, description: str, *, enabled: bool
) -> Iterator[Callable[[int, int], None] | None]:
    """An ``on_progress(done, total)`` callback drawing a bar, or None off a terminal or for
    --json (where stdout must be JSON only)."""
    if not (enabled and console.is_terminal):
        yield None
        return
    with _progress(console) as progress:
        task = progress.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield update


def while_sweeping(
    work: Callable[[], T],
    status: Callable[[], FleetStatusAnswered],
    on_progress: Callable[[int, int], None] | None,
) -> T:
    """``work()`` (asking the inventory to sweep, which answers once it is done), reporting
    the running sweep's done/total from ``status()`` meanwhile when ``on_progress`` is given.

    ``work`` runs on a daemon thread, so Ctrl-C stops the waiting at once; its result, or what
    it raised (a one-line exit included), comes back here. A status that cannot be asked stops
    the reporting, never the sweep.
    """
    if on_progress is None:
        return work()
    outcome: list[T] = []
    raised: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            raised.append(exc)

    worker = threading.Thread(target=run, name="lockstep-sweep", daemon=True)
    worker.start()
    reporting = True
    while worker.is_alive():
        worker.join(SWEEP_POLL_S)
        if not (reporting and worker.is_alive()):
            continue
        try:
            answer = status()
        except BaseException:  # noqa: BLE001 - e.g. the one-line exit of a failed ask
            reporting = False
            continue
        if answer.sweep_running and answer.sweep is not None:
            on_progress(answer.sweep.done, answer.sweep.total)
    if raised:
        raise raised[0]
    return outcome[0]


def follow_sweep(
    status: Callable[[], FleetStatusAnswered], console: Console, *, show: bool
) -> FleetStatusAnswered:
    """The fleet status once the sweep running when called (if any) has ended, drawing
    done/total meanwhile when ``show``; ``status()`` asks the inventory (``fleet.status``).

    Follows the sweep that was running when called, not the ones after it.
    """
    answer = status()
    running = answer.sweep if answer.sweep_running else None
    if running is None:
        return answer
    first = running.id
    with _progress(console) if show and console.is_terminal else _Quiet() as progress:
        task = progress.add_task(f"sweep {first}", total=running.total)
        while running is not None and running.id == first:
            progress.update(task, completed=running.done, total=running.total)
            time.sleep(POLL_S)
            answer = status()
            running = answer.sweep if answer.sweep_running else None
    return answer


class _Quiet:
    """A Progress stand-in that draws nothing (not a terminal, or --json)."""

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, total: float | None = None) -> TaskID:
        return TaskID(0)

    def update(self, task: TaskID, **fields: object) -> None:
        return None
