"""A gated wave for tests and benchmarks: ``wave.planned`` with canary and control per stratum,
and rounds of health reports from its nodes."""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import datetime, timedelta

from lockstep_common.events.v1 import HealthObserved, WavePlanned, WaveStratum
from lockstep_common.vocabulary import Component
from lockstep_healthgate.testing.reports import HEALTHY, Fault, report

STRATUM = "gb200/acme/0000"


def planned_wave(
    rollout_id: str,
    canary: list[str],
    control: list[str],
    *,
    wave: int = 0,
    soak_seconds: int = 60,
) -> WavePlanned:
    """One stratum: ``canary`` updated, ``control`` untouched."""
    return WavePlanned(
        rollout_id=rollout_id,
        wave=wave,
        node_ids=tuple(canary),
        components=(Component.GPU_VBIOS,),
        max_unavailable=1,
        failure_budget=0,
        soak_seconds=soak_seconds,
        strata=(WaveStratum(key=STRATUM, node_ids=tuple(canary), control_ids=tuple(control)),),
    )


def rounds(
    nodes: list[str],
    start: datetime,
    count: int,
    *,
    interval_s: float = 10.0,
    faults: Mapping[str, Fault] | None = None,
    seed: int = 0,
    first_heartbeat: int = 0,
) -> list[HealthObserved]:
    """``count`` rounds of one report per node every ``interval_s``, from ``start``."""
    rng = random.Random(seed)  # noqa: S311 - synthetic readings, not secrets
    faults = faults or {}
    return [
        report(
            n,
            start + timedelta(seconds=i * interval_s),
            first_heartbeat + i,
            rng,
            fault=faults.get(n, HEALTHY),
        )
        for i in range(count)
        for n in nodes
    ]
