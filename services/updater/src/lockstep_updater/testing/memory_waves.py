"""A wave's end in the in-memory updater store (as ``adapters/wave_rows.py``)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from lockstep_common.testing import RecordedEvents
from lockstep_updater.domain.steps import (
    TERMINAL,
    NodeStep,
)
from lockstep_updater.store import (
    UPDATE,
    Completion,
    StepRecord,
    WaveResult,
)
from lockstep_updater.testing.memory_tables import Tables


class MemoryWaves:
    """Wave completion, its re-drives and node history, in ``tables``."""

    __slots__ = ()
    tables: Tables
    events: RecordedEvents
    now: datetime

    async def complete_wave(self, rollout_id: str, wave: int) -> WaveResult | None:
        found = self.tables.waves.get((rollout_id, wave))
        if found is None or found.completed:
            return None
        items = [
            i
            for _, i in sorted(self.tables.items.items())
            if i.rollout_id == rollout_id and i.wave == wave and i.kind == UPDATE
        ]
        if any(i.state not in TERMINAL for i in items):
            return None
        found.completed = True
        found.completed_at = self.now
        return WaveResult(
            rollout_id,
            wave,
            tuple(i.node_id for i in items if i.state is NodeStep.DONE),
            tuple(i.node_id for i in items if i.state is not NodeStep.DONE),
            found.correlation_id,
        )

    async def history(self, node_id: str, limit: int) -> list[StepRecord]:
        return [r for n, r in self.tables.steps if n == node_id][-limit:]

    async def completion_sent(self, rollout_id: str, wave: int, event_id: uuid.UUID) -> None:
        self.tables.waves[(rollout_id, wave)].completed_event = event_id

    async def unanswered_completions(
        self, after_s: float, max_redrives: int, limit: int
    ) -> list[Completion]:
        out = []
        for (rollout_id, number), w in sorted(
            self.tables.waves.items(), key=lambda kv: kv[1].completed_at or self.now
        ):
            moved = [t for t in (w.completed_at, w.redriven_at) if t is not None]
            last = max(moved) if moved else None
            later = any(r == rollout_id and n > number for r, n in self.tables.waves)
            if (
                w.completed_event is not None
                and last is not None
                and w.redrives < max_redrives
                and last <= self.now - timedelta(seconds=after_s * 2**w.redrives)
                and not later
                and rollout_id not in self.tables.halted
            ):
                out.append(Completion(rollout_id, number, w.completed_event, w.redrives))
        return out[:limit]

    async def redrive_completion(self, completion: Completion) -> bool:
        w = self.tables.waves[(completion.rollout_id, completion.wave)]
        w.redriven_at, w.redrives = self.now, w.redrives + 1
        self.tables.republished.append((completion.event_id, f"redrive-{w.redrives}"))
        return True
