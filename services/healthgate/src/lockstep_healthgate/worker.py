"""Judges waves whose soak has elapsed, one at a time, under a fenced lease (as attest's worker).

No JetStream message waits on a soak: ``wave.completed`` only records when it began. This loop
claims a soaked wave (``FOR UPDATE SKIP LOCKED``; a crashed holder's claim is taken over when
its lease lapses), loads its canary and control samples over the window, runs the judge in a
worker thread as of the end of the soak, and commits the verdict with its evidence and the
``gate.*`` event in one transaction, only if its lease token is still the wave's (the fence
against a paused, superseded worker). The verdict is a function of the stored samples, the
policy and the window, so a restart, a second replica or a re-run all reach the same one, and
the wave's single verdict row and event id keep it to one.

Every ``watch_s`` it also runs the heartbeat rule on the soaking waves (``watch_heartbeats``): a
silent node cannot trip anything at ingest, since silence sends no sample.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

from lockstep_common.clock import SYSTEM_CLOCK, Clock
from lockstep_common.periodic import Every
from lockstep_common.service import Resources
from lockstep_common.vocabulary import GateVerdict
from lockstep_gate.decision import GateDecision
from lockstep_healthgate.domain.gating import soak_decision
from lockstep_healthgate.domain.waves import OPEN, Wave, judged_window, sample_table
from lockstep_healthgate.store import Claim, GateStore, VerdictKind
from lockstep_healthgate.verdicts import (
    GateConfig,
    commit_verdict,
    watch_heartbeats,
    with_silent_controls,
)

log = logging.getLogger(__name__)


class GateWorker:
    """The evaluation loop (a ``lockstep_common.service.Worker``)."""

    def __init__(
        self,
        config: GateConfig,
        *,
        store: Callable[[Resources], GateStore],
        poll_s: float,
        grace_s: float,
        lease_s: float,
        max_attempts: int,
        watch_s: float = 10.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self._store = store
        self._poll_s, self._grace_s, self._lease_s = poll_s, grace_s, lease_s
        self._max_attempts = max_attempts
        self._watch_s = watch_s
        self._clock = clock

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        """Claim and judge until stopped."""
        store = self._store(resources)
        watched = -math.inf

        async def claim_one() -> bool:
            nonlocal watched
            if time.monotonic() - watched >= self._watch_s:
                watched = time.monotonic()
                await self.watch(store)
            return await self.step(store)

        await Every(self._poll_s, what="healthgate evaluation").run(claim_one, stopping)

    async def watch(self, store: GateStore) -> int:
        """One round of the heartbeat rule on the soaking waves; returns the trips."""
        async with store.transaction() as tx:
            return await watch_heartbeats(tx, self.config, now=self._clock.now())

    async def step(self, store: GateStore) -> bool:
        """Claim one soaked wave and judge it; False when none was due."""
        async with store.transaction() as tx:
            claim = await tx.claim_due(self._clock.now(), self._grace_s, self._lease_s)
            wave = None if claim is None else await tx.wave(claim.rollout_id, claim.wave)
        if claim is None or wave is None:
            return False
        await self.judge(store, claim, wave)
        return True

    async def judge(self, store: GateStore, claim: Claim, wave: Wave) -> None:
        """Judge one claimed wave and commit its verdict, if we still hold it."""
        window = judged_window(wave, self.config.baseline_s)
        if claim.attempts > self._max_attempts:
            decision = GateDecision(
                verdict=GateVerdict.INCONCLUSIVE,
                reason=f"evaluation did not complete in {self._max_attempts} attempts",
                score=0.0,
                metrics=(),
                rules=(),
                offending_nodes=(),
                evaluated_at=window.end.timestamp(),
            )
        else:
            async with store.transaction() as tx:
                # The update itself (plan to completion) is no part of the table: its rows
                # stay in the database, which on a whole-fleet wave is most of the window.
                cols = await tx.samples(
                    [m.node_id for m in wave.members],
                    None,
                    window.baseline_start,
                    window.end,
                    skip=(window.baseline_end, window.start),
                )
            table = await asyncio.to_thread(
                lambda: sample_table(
                    wave.members,
                    with_silent_controls(wave, cols, window.start),
                    soak_start=window.start.timestamp(),
                    baseline_end=window.baseline_end.timestamp(),
                )
            )
            del cols  # the table holds what the judge reads: not both while it runs
            decision = await asyncio.to_thread(
                soak_decision,
                table,
                self.config.policy,
                due_at=window.end,
                roster=wave.canary_strata,
            )
        async with store.transaction() as tx:
            if not await tx.still_holds(claim):
                log.warning(
                    "gate evaluation of %s wave %d was taken over; discarding this result",
                    claim.rollout_id,
                    claim.wave,
                )
                return
            current = await tx.wave(claim.rollout_id, claim.wave)
            if current is None or current.state not in OPEN:
                return
            await commit_verdict(
                tx,
                wave,
                decision,
                kind=VerdictKind.SOAK,
                window=(window.start, window.end),
                config=self.config,
            )
