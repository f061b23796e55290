"""Invariants under chaos (issue 13 item 2; reliability.md section 7, family I).

A Hypothesis ``RuleBasedStateMachine`` over the real services: attest, inventory, planner,
updater and healthgate in-process on real NATS + PostgreSQL over one simulated fleet of 10
nodes (``world.World``), started once for the whole run. Every generated program is a fresh,
short rollout of an attested GPU VBIOS bundle over the fleet (canary of 5, then 5), and its
steps are, in any order:

- let the system run (events are delivered as the services pull them);
- replay events the services already committed for the rollout, in a shuffled order, as the
  same envelope (a duplicate the inboxes drop) or a new one (a resent event handlers absorb);
- kill any service (in-flight work cancelled) and start a new process of it;
- expire every held lease at once (updater items, planner intents, healthgate evaluations), as
  if their holders were paused past them;
- BMC faults: 5xx, hangs, connection resets, a BMC reboot in the middle of a task;
- scheduler faults: drains refused with 429, drains that take effect late, jobs that keep
  nodes draining, foreign drains;
- health regressions (the image degrades the GPUs it activates on);
- operator abort (``lockstep rollout abort``'s row in the planner's commands table).

After every step the invariants of ``invariants.py`` hold: at most one accepted push per node
per version; no node flashing unless drained; nodes out of service within the pool's budget
(also sampled every 50 ms); no node of wave k+1 touched before wave k passed; terminal states
never regress; every accepted image from the attested bundle; and, once the program ends (an
abort unless the rollout ended by itself) and everything is at rest, nothing left cordoned by
Lockstep without a failed or quarantined work item and its reason.

Why a loop in a thread: Hypothesis calls rules synchronously, program after program, while the
services' pools and connections belong to one asyncio loop; ``LoopThread`` runs that loop for
the whole test and the rules submit coroutines to it, so the fleet keeps working between steps.

Run length: ``LOCKSTEP_CHAOS_EXAMPLES`` programs (default 200, what ``./dev test`` runs) of up
to ``LOCKSTEP_CHAOS_STEPS`` steps (default 12). Nightly runs use more, e.g.
``LOCKSTEP_CHAOS_EXAMPLES=2000 .venv/bin/pytest tests/integration/chaos -q`` (README, "Tests").
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from lockstep_sim.faults import Fault
from lockstep_sim.fleet import POOLS
from tests.integration.chaos.invariants import Program, violations
from tests.integration.chaos.loop_thread import LoopThread
from tests.integration.chaos.world import NODES, SERVICES, World
from tests.speed import scaled

pytestmark = pytest.mark.integration
EXAMPLES = int(os.environ.get("LOCKSTEP_CHAOS_EXAMPLES", "200"))
STEPS = int(os.environ.get("LOCKSTEP_CHAOS_STEPS", "12"))
NODE_IDS = [f"node-{i:05d}" for i in range(NODES)]
# Real seconds per program at most (an idle program quiesces in about one), for the timeout.
PROGRAM_BUDGET_S = 8


class Chaos(RuleBasedStateMachine):
    """One program: a new rollout, chaos steps, invariants after each (module docstring)."""

    loop: ClassVar[LoopThread]
    world: ClassVar[World]

    def __init__(self) -> None:
        super().__init__()
        self.program: Program = self.loop.run(self.world.new_program())

        self.let_it_end = False

    def run(self, coro: Any, timeout_s: float = 60.0) -> Any:
        return self.loop.run(coro, timeout_s)

    @initialize(ending=st.integers(0, 11))
    def choose_ending(self, ending: int) -> None:
        # One program in twelve lets its rollout end by itself (completed, or halted by a gate)
        # before it is closed, so later waves and gate verdicts are exercised too; the others
        # are aborted as soon as their steps are done (a full rollout takes ~7 s here).
        self.let_it_end = ending == 0

    @rule(seconds=st.sampled_from([0.05, 0.2, 0.5]))
    def let_it_run(self, seconds: float) -> None:
        self.run(asyncio.sleep(seconds))

    @rule(
        picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=6),
        fresh=st.booleans(),
        earlier=st.booleans(),
    )
    def replay_events(self, picks: list[int], fresh: bool, earlier: bool) -> None:
        self.run(self.world.replay(picks, fresh=fresh, earlier=earlier))

    @rule(service=st.sampled_from(SERVICES))
    def kill(self, service: str) -> None:
        self.run(self.world.kill(service))

    @rule(service=st.sampled_from(SERVICES))
    def restart(self, service: str) -> None:
        self.run(self.world.restart(service))

    @rule()
    def expire_leases(self) -> None:
        self.run(self.world.expire_leases())

    @rule(
        kind=st.sampled_from(["http_5xx", "hang", "connection_reset"]),
        nodes=st.lists(st.sampled_from(NODE_IDS), min_size=1, max_size=3, unique=True),
        count=st.integers(1, 4),
        status=st.sampled_from([500, 502, 503]),
    )
    def bmc_request_fault(self, kind: str, nodes: list[str], count: int, status: int) -> None:
        # retry_after 0 and hangs of 0.3 s: the updater's bounded retries, at test speed.
        fault = Fault(
            kind, nodes=tuple(nodes), count=count, status=status, retry_after=0, max_seconds=0.3
        )
        self.loop.call(self.world.add_fault, fault)

    @rule(
        nodes=st.lists(st.sampled_from(NODE_IDS), min_size=1, max_size=3, unique=True),
        resume=st.booleans(),
        forget_state=st.booleans(),
    )
    def bmc_reboot_mid_task(self, nodes: list[str], resume: bool, forget_state: bool) -> None:
        # 100 BMC minutes at the simulator's 0.002 s per minute: gone for 0.2 s.
        self.loop.call(
            self.world.add_fault,
            Fault(
                "bmc_reboot_mid_task",
                nodes=tuple(nodes),
                count=1,
                duration_minutes=100,
                resume=resume,
                forget_state=forget_state,
            ),
        )

    @rule(count=st.integers(1, 8), node=st.none() | st.sampled_from(NODE_IDS))
    def scheduler_429(self, count: int, node: str | None) -> None:
        self.loop.call(self.world.throttle_drains, count, node)

    @rule(seconds=st.sampled_from([0.3, 1.0, 3.0]), count=st.integers(1, 2))
    def slow_scheduler(self, seconds: float, count: int) -> None:
        # Drains that take effect late, whoever still waits for them: with a kill or a lapsed
        # lease meanwhile, the drain of a worker that lost its item lands after the fact.
        self.loop.call(self.world.rt.scheduler.slow_drains, seconds, count)

    @rule(
        pool=st.sampled_from(POOLS),
        nodes=st.integers(1, 2),
        duration_s=st.sampled_from([3_000.0, 15_000.0, 90_000.0]),
    )
    def busy_nodes(self, pool: str, nodes: int, duration_s: float) -> None:
        # 0.1 s, 0.5 s and 3 s of real time: the last outlasts the updater's drain deadline.
        self.loop.call(self.world.busy, pool, nodes, duration_s)

    @rule(node=st.sampled_from(NODE_IDS))
    def foreign_drain(self, node: str) -> None:
        self.loop.call(self.world.foreign_drain, node)

    @rule()
    def health_regression(self) -> None:
        self.loop.call(self.world.add_fault, Fault("degrade_health", components=("gpu",)))

    @rule()
    def operator_abort(self) -> None:
        self.run(self.world.abort())

    @invariant()
    def promises_hold(self) -> None:
        found = violations(self.program, self.run(self.world.observe()))
        assert not found, "\n".join(found)

    def teardown(self) -> None:
        seen = self.run(self.world.quiesce(settle_s=20 if self.let_it_end else 0), timeout_s=90)
        found = violations(self.program, seen)
        assert not found, "\n".join(found)


def test_without_chaos_a_program_completes_its_rollout(world: Any) -> None:
    """The world works: an undisturbed program rolls the bundle out over every node."""
    loop, w = world
    started = time.monotonic()
    program = loop.run(w.new_program())
    seen = loop.run(w.quiesce(abort=False), 60)
    assert violations(program, seen) == []
    assert seen.rollout_state == "completed", seen.summary()
    assert sorted(seen.work) == NODE_IDS
    assert {step for _, step, _ in seen.work.values()} == {"done"}
    # The world is fast enough for 200 programs: a whole rollout (two waves, two soaks) takes
    # about 7 s here.
    assert time.monotonic() - started < scaled(30)


@pytest.mark.timeout(EXAMPLES * PROGRAM_BUDGET_S + 300)
def test_a_rollout_keeps_its_promises_under_chaos(world: Any) -> None:
    loop, w = world
    Chaos.loop, Chaos.world = loop, w
    run_state_machine_as_test(
        Chaos,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )
    # The programs got somewhere: nodes flashed, waves gated both ways, rollouts halted and
    # completed, nodes ended every way (a run that only ever refused would prove nothing).
    print(f"chaos: {w.programs} programs, outcomes {w.stats}, refusals {w.refusals}")
    print("coverage:", dict(sorted(w.coverage.items())))
    print("seconds:", {k: round(sum(v), 1) for k, v in w.timings.items()})
    assert w.stats.get("refused", 0) <= EXAMPLES // 10, w.refusals
    assert w.coverage["image pushed"] >= EXAMPLES // 4, w.coverage
    for seen in ("gate passed on wave 0", "gate tripped on wave 0", "node done", "node failed"):
        assert w.coverage[seen] >= 1, (seen, w.coverage)
