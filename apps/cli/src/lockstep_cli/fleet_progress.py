"""Progress of a sweep on a terminal: this process's own sweep, or one another process runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import asyncpg
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from lockstep_inventory.admin import sweep_in_progress

POLL_S = 0.2  # how often --watch re-reads the sweeps row: cheap, and smooth enough to watch


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


async def follow_sweep(conn: asyncpg.Connection, console: Console, *, show: bool) -> None:
    """Return once the running sweep (if any) ends, drawing done/total meanwhile when ``show``.

    Follows the sweep that was running when called, not the ones after it.
    """
    running = await sweep_in_progress(conn)
    if running is None:
        return
    first = running.id
    with _progress(console) if show and console.is_terminal else _Quiet() as progress:
        task = progress.add_task(f"sweep {first}", total=running.total)
        while running is not None and running.id == first:
            progress.update(task, completed=running.done, total=running.total)
            await asyncio.sleep(POLL_S)
            running = await sweep_in_progress(conn)


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
