"""Running an external command (Slurm's ``scontrol``/``squeue``) the one safe way: an argument
list, never a shell; stdin closed; bounded in time and in what is read back.

Each caller maps the outcome to its own errors (the planner's occupancy poll treats every
failure as "ask again later", the updater's scheduler tells a busy controller from a refusal).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Finished", "NoAnswer", "run_bounded"]

MAX_ERROR_CHARS = 4096


class NoAnswer(TimeoutError):
    """The command did not finish within its time; it was killed."""


@dataclass(frozen=True, slots=True)
class Finished:
    returncode: int
    out: str
    """Standard output, cut at ``max_output`` bytes."""
    error: str
    """Standard error as one line (whitespace collapsed), cut at 4 KiB."""


async def run_bounded(
    program: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout_s: float,
    max_output: int,
) -> Finished:
    """Run ``program args`` and wait at most ``timeout_s`` for it.

    Raises:
        OSError: the program cannot be started (missing, not executable).
        NoAnswer: it did not finish in time (it is killed and reaped first).
    """
    proc = await asyncio.create_subprocess_exec(
        program,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise NoAnswer(f"no answer within {timeout_s:g}s") from None
    return Finished(
        returncode=proc.returncode if proc.returncode is not None else -1,
        out=out[:max_output].decode(errors="replace"),
        error=" ".join(err[:MAX_ERROR_CHARS].decode(errors="replace").split()),
    )
