"""``Occupancy`` on a real Slurm cluster: the nodes of every running (or completing) job.

``squeue --noheader --states=RUNNING,COMPLETING --format=%N`` lists each job's nodes as a
compressed hostlist (``gpu[001-004]``); ``scontrol show hostnames`` expands them, one name a
line, as Slurm itself does (no hostlist parser of our own to get wrong). COMPLETING counts: a
job's epilog still runs on its nodes. Every call is an argument list (no shell) bounded by a
timeout, authenticated through the host's munge like any Slurm client; any failure is
transient: the planner keeps the lifecycles it had and asks again on its next pass.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from lockstep_common.commands import NoAnswer, run_bounded
from lockstep_common.errors import TransientError

MAX_OUTPUT = 8 << 20  # 12,500 node names, a line each, with room to spare


class SlurmJobs:
    """Which nodes run a job, from ``squeue`` and ``scontrol`` (``SLURM_CONF`` = ``conf`` when
    given), each call bounded by ``timeout_s``."""

    def __init__(
        self,
        *,
        squeue: str = "squeue",
        scontrol: str = "scontrol",
        conf: str | None = None,
        timeout_s: float = 30.0,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.squeue, self.scontrol, self.timeout_s = squeue, scontrol, timeout_s
        self._env = dict(os.environ if environ is None else environ)
        if conf:
            self._env["SLURM_CONF"] = conf

    async def _run(self, program: str, args: Sequence[str]) -> str:
        what = f"{Path(program).name} {' '.join(args[:2])}"
        try:
            done = await run_bounded(
                program, args, env=self._env, timeout_s=self.timeout_s, max_output=MAX_OUTPUT
            )
        except NoAnswer as exc:
            raise TransientError(f"{what}: {exc}") from None
        except OSError as exc:
            raise TransientError(f"{what}: cannot run: {exc}") from None
        if done.returncode != 0:
            raise TransientError(f"{what}: {done.error or f'exit {done.returncode}'}")
        return done.out

    async def busy_nodes(self) -> frozenset[str]:
        lists = await self._run(
            self.squeue, ["--noheader", "--states=RUNNING,COMPLETING", "--format=%N"]
        )
        hostlists = sorted({line.strip() for line in lists.splitlines() if line.strip()})
        if not hostlists:
            return frozenset()
        names = await self._run(self.scontrol, ["show", "hostnames", ",".join(hostlists)])
        return frozenset(line.strip() for line in names.splitlines() if line.strip())
