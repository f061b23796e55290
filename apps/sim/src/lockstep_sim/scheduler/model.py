"""A scheduler emulation shaped like Slurm partitions and Kubernetes node pools (no I/O).

Node states follow Slurm's names (idle / allocated / mixed / draining / drained / down).
Lockstep's rule, tested here: it must never uncordon what it did not cordon, so ``resume``
refuses a node drained by someone else unless forced, and says who drained it and why.
Time is simulated: ``now()`` is real clock seconds times ``time_scale``.
"""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lockstep_sim.scheduler.errors import (
    Conflict,
    DrainedByOther,
    InvalidTransition,
    TooManyRequests,
    UnknownNode,
    UnknownPool,
)


class NodeState(enum.StrEnum):
    """Scheduler view of a node (Slurm names; K8s: cordoned = draining/drained)."""

    IDLE = "idle"
    ALLOCATED = "allocated"
    MIXED = "mixed"
    DRAINING = "draining"
    DRAINED = "drained"
    DOWN = "down"


_S = NodeState
ALLOWED: dict[NodeState, frozenset[NodeState]] = {
    _S.IDLE: frozenset({_S.ALLOCATED, _S.MIXED, _S.DRAINED, _S.DOWN}),
    _S.MIXED: frozenset({_S.IDLE, _S.ALLOCATED, _S.DRAINING, _S.DOWN}),
    _S.ALLOCATED: frozenset({_S.IDLE, _S.MIXED, _S.DRAINING, _S.DOWN}),
    # Draining ends in drained when the last job ends, or is cancelled by a resume.
    _S.DRAINING: frozenset({_S.DRAINED, _S.IDLE, _S.MIXED, _S.ALLOCATED, _S.DOWN}),
    _S.DRAINED: frozenset({_S.IDLE, _S.DOWN}),
    _S.DOWN: frozenset({_S.IDLE, _S.DRAINED}),
}


def check_transition(current: NodeState, target: NodeState) -> None:
    """Raise ``InvalidTransition`` unless ``current -> target`` is allowed (or a no-op)."""
    if current is not target and target not in ALLOWED[current]:
        raise InvalidTransition(f"node state cannot go from {current.value} to {target.value}")


@dataclass(frozen=True, slots=True)
class Drain:
    """Who drained a node, why, and when (simulated seconds)."""

    reason: str
    by: str
    at: float


@dataclass(slots=True)
class Node:
    """One schedulable node."""

    node_id: str
    pool: str
    gpus: int = 8
    used_gpus: int = 0
    drain: Drain | None = None
    down_reason: str | None = None
    jobs: set[str] = field(default_factory=set)

    @property
    def state(self) -> NodeState:
        """The state derived from drain, down flag and allocation."""
        if self.down_reason is not None:
            return NodeState.DOWN
        if self.drain is not None:
            return NodeState.DRAINING if self.jobs else NodeState.DRAINED
        if self.used_gpus == 0:
            return NodeState.IDLE
        return NodeState.ALLOCATED if self.used_gpus >= self.gpus else NodeState.MIXED


@dataclass(slots=True)
class Job:
    """A running job."""

    job_id: str
    pool: str
    node_ids: tuple[str, ...]
    gpus_per_node: int
    started_at: float
    ends_at: float


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One recorded state change."""

    seq: int
    at: float
    node_id: str
    action: str
    by: str
    from_state: NodeState
    to_state: NodeState
    detail: str = ""


class Scheduler:
    """Pools, nodes, jobs and drains, advanced lazily by ``tick``.

    Args:
        pools: pool name -> node ids.
        gpus_per_node: GPUs each node offers.
        time_scale: simulated seconds per clock second.
        clock: monotonic clock in seconds (injected for tests).
        seed: seeds job arrivals and foreign drains.
        arrival_rate_per_s: jobs arriving per simulated second (0: none).
        job_duration_s: (min, max) simulated duration of arriving jobs.
    """

    def __init__(
        self,
        pools: dict[str, list[str]],
        *,
        gpus_per_node: int = 8,
        time_scale: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        seed: int = 0,
        arrival_rate_per_s: float = 0.0,
        job_duration_s: tuple[float, float] = (60.0, 600.0),
    ) -> None:
        self.nodes: dict[str, Node] = {}
        self.pools: dict[str, list[str]] = {}
        for pool, ids in pools.items():
            self.pools[pool] = list(ids)
            for node_id in ids:
                if node_id in self.nodes:
                    raise ValueError(f"node {node_id!r} is in two pools")
                self.nodes[node_id] = Node(node_id, pool, gpus_per_node)
        self.jobs: dict[str, Job] = {}
        self.ledger: list[LedgerEntry] = []
        self.time_scale = time_scale
        self.arrival_rate_per_s = arrival_rate_per_s
        self.job_duration_s = job_duration_s
        self._clock = clock
        self._t0 = clock()
        self._last_tick = 0.0
        self._arrival_credit = 0.0
        self._job_seq = 0
        self._rng = random.Random(seed)  # noqa: S311 - simulation
        self._throttled: dict[str | None, int] = {}  # node id (None: any) -> drains to refuse
        self._drain_delays: list[float] = []  # real seconds, one per coming drain request
        self.slowed_drains_waiting = 0  # slowed drain requests not yet taken effect
        self.slowed_drains_done = 0  # slowed drain requests that took effect (or were refused)

    def now(self) -> float:
        """Simulated seconds since the scheduler started."""
        return (self._clock() - self._t0) * self.time_scale

    def node(self, node_id: str) -> Node:
        """The node, or ``UnknownNode``."""
        try:
            return self.nodes[node_id]
        except KeyError:
            raise UnknownNode(f"no node {node_id!r}") from None

    def _record(self, node: Node, before: NodeState, action: str, by: str, detail: str) -> None:
        after = node.state
        check_transition(before, after)
        entry = LedgerEntry(
            len(self.ledger) + 1, self.now(), node.node_id, action, by, before, after, detail
        )
        self.ledger.append(entry)

    def submit_job(
        self, pool: str, *, nodes: int = 1, gpus_per_node: int = 8, duration_s: float = 300.0
    ) -> Job | None:
        """Start a job on the first nodes of ``pool`` with room; None when it does not fit."""
        if pool not in self.pools:
            raise UnknownPool(f"no pool {pool!r} (pools: {', '.join(sorted(self.pools))})")
        free = [
            self.nodes[n]
            for n in self.pools[pool]
            if self.nodes[n].state in (NodeState.IDLE, NodeState.MIXED)
            and self.nodes[n].gpus - self.nodes[n].used_gpus >= gpus_per_node
        ]
        if len(free) < nodes:
            return None
        self._job_seq += 1
        now = self.now()
        job = Job(
            f"job-{self._job_seq}",
            pool,
            tuple(n.node_id for n in free[:nodes]),
            gpus_per_node,
            now,
            now + duration_s,
        )
        self.jobs[job.job_id] = job
        for node in free[:nodes]:
            before = node.state
            node.used_gpus += gpus_per_node
            node.jobs.add(job.job_id)
            self._record(node, before, "job_start", "scheduler", job.job_id)
        return job

    def occupy(self, node_ids: list[str], *, duration_s: float, name: str = "") -> Job:
        """Fault knob: one job across exactly ``node_ids`` (a cluster occupying a fabric
        domain, seed 002), whatever their pools; ``Conflict`` when one has no free GPUs."""
        nodes = [self.node(n) for n in node_ids]
        busy = [n.node_id for n in nodes if n.state not in (NodeState.IDLE,)]
        if busy or not nodes:
            raise Conflict(f"cannot occupy {', '.join(busy) or 'no nodes'}: not idle")
        self._job_seq += 1
        now = self.now()
        job = Job(
            name or f"job-{self._job_seq}",
            nodes[0].pool,
            tuple(node_ids),
            nodes[0].gpus,
            now,
            now + duration_s,
        )
        self.jobs[job.job_id] = job
        for node in nodes:
            before = node.state
            node.used_gpus += job.gpus_per_node
            node.jobs.add(job.job_id)
            self._record(node, before, "job_start", "scheduler", job.job_id)
        return job

    def finish_job(self, job_id: str) -> None:
        """The job ends now (its nodes drain to drained, or go idle)."""
        job = self.jobs.get(job_id)
        if job is None:
            raise Conflict(f"no running job {job_id!r}")
        self._end_job(job, "job_end")

    def _end_job(self, job: Job, action: str) -> None:
        del self.jobs[job.job_id]
        for node_id in job.node_ids:
            node = self.nodes[node_id]
            before = node.state
            node.used_gpus -= job.gpus_per_node
            node.jobs.discard(job.job_id)
            self._record(node, before, action, "scheduler", job.job_id)

    def tick(self) -> None:
        """Advance to ``now()``: end finished jobs (draining -> drained), start arrivals."""
        now = self.now()
        for job in sorted(self.jobs.values(), key=lambda j: (j.ends_at, j.job_id)):
            if job.ends_at <= now:
                self._end_job(job, "job_end")
        self._arrival_credit += self.arrival_rate_per_s * max(0.0, now - self._last_tick)
        self._last_tick = now
        pools = sorted(self.pools)
        while self._arrival_credit >= 1.0 and pools:
            self._arrival_credit -= 1.0
            self.submit_job(
                self._rng.choice(pools),
                gpus_per_node=self._rng.choice((4, 8)),
                duration_s=self._rng.uniform(*self.job_duration_s),
            )

    def drain(self, node_id: str, reason: str, by: str) -> NodeState:
        """Drain (cordon) a node; running jobs finish first (draining -> drained).

        Idempotent for the same actor. Raises ``DrainedByOther`` when another actor already
        drained it: the drain is theirs, and so is the decision to resume.
        """
        node = self.node(node_id)
        for key in (node_id, None):
            if self._throttled.get(key, 0) > 0:
                self._throttled[key] -= 1
                raise TooManyRequests(f"drain of {node_id!r} refused for now (injected 429)")
        if node.drain is not None:
            if node.drain.by != by:
                raise DrainedByOther(_drained_by(node, node.drain))
            return node.state
        before = node.state
        node.drain = Drain(reason, by, self.now())
        self._record(node, before, "drain", by, reason)
        return node.state

    def resume(self, node_id: str, by: str, *, force: bool = False) -> NodeState:
        """Resume (uncordon) a node drained by ``by``; ``force`` overrides another's drain.

        Raises:
            UnknownNode: no such node.
            Conflict: the node is not drained.
            DrainedByOther: drained by someone else and ``force`` is false.
        """
        node = self.node(node_id)
        if node.drain is None:
            raise Conflict(f"node {node_id!r} is not drained (state {node.state.value})")
        if node.drain.by != by and not force:
            raise DrainedByOther(
                f"{_drained_by(node, node.drain)}; {by!r} may not resume it without force"
            )
        before, drain = node.state, node.drain
        node.drain = None
        detail = f"forced over drain by {drain.by!r}" if drain.by != by else ""
        self._record(node, before, "resume", by, detail)
        return node.state

    def throttle_drains(self, count: int, node_id: str | None = None) -> None:
        """Fault knob: the next ``count`` drain requests (of ``node_id``, or of any node) are
        refused with 429, as an eviction blocked by a PodDisruptionBudget (reliability.md 7.E1);
        ``count`` 0 lifts it."""
        if node_id is not None:
            self.node(node_id)
        self._throttled[node_id] = count

    def slow_drains(self, seconds: float, count: int = 1) -> None:
        """Fault knob: the next ``count`` drain requests take effect ``seconds`` (real) after
        they arrive, as on an API server under load; the HTTP layer waits them out."""
        self._drain_delays = [seconds] * count

    def next_drain_delay(self) -> float:
        """The delay of the drain request arriving now (0: none), used up by asking."""
        return self._drain_delays.pop(0) if self._drain_delays else 0.0

    def inject_foreign_drain(
        self, node_id: str | None = None, *, reason: str = "maintenance", by: str = "ops"
    ) -> str:
        """Fault knob: someone else drains a node (a random undrained one when not given)."""
        if node_id is None:
            candidates = sorted(n.node_id for n in self.nodes.values() if n.drain is None)
            if not candidates:
                raise Conflict("every node is already drained")
            node_id = self._rng.choice(candidates)
        self.drain(node_id, reason, by)
        return node_id

    def mark_down(self, node_id: str, reason: str) -> None:
        """Fault knob: the node stops responding; its jobs are killed."""
        node = self.node(node_id)
        for job_id in sorted(node.jobs):
            self._end_job(self.jobs[job_id], "job_killed")
        before = node.state
        node.down_reason = reason
        self._record(node, before, "down", "scheduler", reason)

    def mark_up(self, node_id: str) -> None:
        """The node responds again (it stays drained if it was)."""
        node = self.node(node_id)
        before = node.state
        node.down_reason = None
        self._record(node, before, "up", "scheduler", "")


def _drained_by(node: Node, drain: Drain) -> str:
    return f"node {node.node_id!r} was drained by {drain.by!r} (reason: {drain.reason!r})"
