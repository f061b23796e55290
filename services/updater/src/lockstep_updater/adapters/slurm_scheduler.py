"""The ``Scheduler`` port on a real Slurm cluster, through ``scontrol``.

- cordon: ``scontrol update NodeName=X State=DRAIN Reason="lockstep-updater: <why>"``. The
  reason carries ``ports.OWNER``: that is how a drain is told to be Lockstep's. A node already
  taken out of service by someone else (a drain, down or failed, with their reason) raises
  :class:`ForeignDrain` and is not written to, so its state and reason stay theirs.
- drain_state: ``scontrol --oneliner show node X``, read by ``domain.slurm_node``: DRAIN with
  jobs still allocated is draining, DRAIN on an idle node is drained.
- resume: ``State=RESUME`` only when the drain's reason is Lockstep's.
- own_drains: every node whose drain reason is Lockstep's (``scontrol --oneliner show node``).

Jobs are never cancelled: the updater runs no ``scancel`` and no ``State=DOWN`` (which would
kill the jobs on the node); a drain that does not complete by the executor's drain deadline is
given back and the node skipped. ``scontrol`` is used rather than slurmrestd: it needs no
extra daemon nor JWT key, authenticates through the host's munge like every Slurm client,
and its node output is stable across the versions Debian ships (22.05 has no ``--json``).

Every call is an argument list (no shell) run with a timeout. A controller that does not
answer is "not now" (:class:`SchedulerUnavailable`); a node Slurm does not know, or an update
Slurm refuses (no privilege), is permanent (:class:`SlurmRefused`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from lockstep_common.commands import NoAnswer, run_bounded
from lockstep_common.errors import PermanentError
from lockstep_updater.domain.slurm_node import (
    SlurmNode,
    UnreadableNode,
    lockstep_reason,
    parse_node,
)
from lockstep_updater.ports import DrainState, ForeignDrain, SchedulerUnavailable

MAX_OUTPUT = 1 << 20  # one node's line is about 1 KiB
TRANSIENT_HINTS = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "communication connection failure",
    "slurm_persist_conn",
    "temporarily unavailable",
    "try again",
)
"""``scontrol`` messages (slurm/src/common/slurm_errno.c) that mean the controller is busy or
away rather than that the request is wrong."""


class SlurmRefused(PermanentError):
    """Slurm refused the request or does not know the node; retrying repeats the answer."""


class SlurmScheduler:
    """``Scheduler`` through ``scontrol`` (at ``scontrol``, with ``SLURM_CONF`` = ``conf``
    when given), each call bounded by ``timeout_s``."""

    def __init__(
        self,
        *,
        scontrol: str = "scontrol",
        conf: str | None = None,
        timeout_s: float = 30.0,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.scontrol = scontrol
        self.timeout_s = timeout_s
        self._env = dict(os.environ if environ is None else environ)
        if conf:
            self._env["SLURM_CONF"] = conf

    async def _run(self, args: Sequence[str]) -> str:
        command = f"scontrol {' '.join(args[:2])}"
        try:
            done = await run_bounded(
                self.scontrol, args, env=self._env, timeout_s=self.timeout_s, max_output=MAX_OUTPUT
            )
        except NoAnswer as exc:
            raise SchedulerUnavailable(f"{command}: {exc}") from None
        except OSError as exc:
            raise SchedulerUnavailable(f"{self.scontrol}: cannot run: {exc}") from None
        if done.returncode != 0:
            message = done.error or done.out.strip()
            what = f"{command}: {message or f'exit {done.returncode}'}"
            if any(hint in message.lower() for hint in TRANSIENT_HINTS):
                raise SchedulerUnavailable(what)
            raise SlurmRefused(what)
        return done.out

    async def node(self, node_id: str) -> SlurmNode:
        """The node as the controller knows it now."""
        text = await self._run(["--oneliner", "show", "node", node_id])
        try:
            node = parse_node(text)
        except UnreadableNode as exc:
            raise SlurmRefused(f"scontrol show node {node_id}: {exc}") from None
        if node.name != node_id:
            raise SlurmRefused(f"scontrol show node {node_id}: answered for {node.name}")
        return node

    async def own_drains(self) -> list[str]:
        """Every node whose drain reason is Lockstep's (``scontrol --oneliner show node``:
        one line a node)."""
        text = await self._run(["--oneliner", "show", "node"])
        out = []
        for line in text.splitlines():
            if "NodeName=" not in line:
                continue  # blank, or "No nodes in the system"
            try:
                node = parse_node(line)
            except UnreadableNode as exc:
                raise SlurmRefused(f"scontrol show node: {exc}") from None
            if node.ours:
                out.append(node.name)
        return out

    async def cordon(self, node_id: str, reason: str) -> None:
        node = await self.node(node_id)
        if node.ours:
            return  # already Lockstep's: idempotent, the first reason stays
        if node.drained:
            why = node.reason or "no reason given"
            raise ForeignDrain(f"{node_id} is {node.state.lower()} by someone else: {why}")
        await self._run(
            ["update", f"NodeName={node_id}", "State=DRAIN", f"Reason={lockstep_reason(reason)}"]
        )

    async def drain_state(self, node_id: str) -> DrainState:
        return (await self.node(node_id)).drain_state()

    async def resume(self, node_id: str) -> bool:
        node = await self.node(node_id)
        if not node.ours:
            return False  # nothing of ours: a foreign drain keeps its state and reason
        await self._run(["update", f"NodeName={node_id}", "State=RESUME"])
        return True
