"""How much slower this machine runs now than the one the tests' time bounds were set on.

Tests wait for conditions, not clocks; but some bounds are the point (a rollout finishes
within so long, a chaos run fits its budget) and some waits need a deadline so that a hang
fails instead of blocking the suite. Those are written for the reference machine (2 cores,
quiet) and multiplied by ``slowdown()``: a fixed pure-Python workload timed here, median of
seven, against what it took there. A machine twice as slow, or one whose cores are shared
with other work, gets deadlines twice as long; a faster one keeps them (never below 1x).
``LOCKSTEP_TEST_SLOWDOWN`` sets the factor instead (a runner known to be slow).
"""

from __future__ import annotations

import os
import statistics
import time
from functools import cache

# The workload's best time on the reference machine (the 2-core one the bounds were set on).
REFERENCE_S = 0.038
SAMPLES = 7


def _workload() -> float:
    started = time.perf_counter()
    acc = 0
    for i in range(300_000):
        acc += (i * i) % 7
    sorted(str(i) for i in range(30_000))
    return time.perf_counter() - started


@cache
def slowdown() -> float:
    """The factor (>= 1) by which this machine is slower than the reference, measured once."""
    forced = os.environ.get("LOCKSTEP_TEST_SLOWDOWN")
    if forced:
        factor = float(forced)
        if factor <= 0:
            raise ValueError(f"LOCKSTEP_TEST_SLOWDOWN must be > 0, not {forced!r}")
        return max(1.0, factor)
    measured = statistics.median(_workload() for _ in range(SAMPLES))
    return max(1.0, measured / REFERENCE_S)


def scaled(seconds: float) -> float:
    """``seconds`` on the reference machine, as long as it takes here."""
    return seconds * slowdown()
