"""Whether the healthgate can ever judge a plan's canary (issue 31).

The healthgate compares, per stratum, the canary's nodes with as many untouched control nodes
of the same stratum, and answers "too little data" (inconclusive, never a pass) while either
side is under its gate policy's ``[minimum]``. A stratum too small to hold both, say 8 nodes
under a minimum of 5 canary and 5 control, gives a canary gate that is inconclusive however long
it soaks: the rollout pauses at wave 0, and the only way on is an operator's ``resume``, which
accepts the wave with no evidence at all.

So the planner refuses such a plan before anyone approves it, naming each stratum, its size and
what the gate needs, rather than merging small strata into larger ones: a stratum is a
profile x supplier x starting stack, and comparing a canary with controls of another hardware
revision or stack is exactly the unlike-with-unlike comparison the gate exists to avoid
(Kayenta's canary-vs-baseline, research/peers.md section 10). The operator decides instead:
leave the stratum out of scope (and move it in a rollout of its own under a policy that fits
it), or lower the gate's minimum knowingly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lockstep_planner.domain.canary import StratumCover

SHOWN = 5
"""Strata named before "and N more": one line each, the refusal stays readable."""


@dataclass(frozen=True, slots=True)
class GateMinimum:
    """The gate policy's minimum sample per stratum (``lockstep_gate`` policy ``[minimum]``)."""

    canary_nodes: int
    control_nodes: int


def stratum_name(cover: StratumCover) -> str:
    """How a stratum is named to operators and in ``wave.planned`` (profile/supplier/stack)."""
    s = cover.stratum
    return f"{s.profile}/{s.supplier}/{s.stack[:12]}"


def unjudgeable(strata: Iterable[StratumCover], minimum: GateMinimum) -> list[str]:
    """One reason per stratum whose canary or control is under the gate's minimum, or none."""
    short = [
        s
        for s in strata
        if len(s.canary) < minimum.canary_nodes or len(s.controls) < minimum.control_nodes
    ]
    need = minimum.canary_nodes + minimum.control_nodes
    reasons = [
        f"stratum {stratum_name(s)} has {s.size} node(s) in scope: canary {len(s.canary)}, "
        f"control {len(s.controls)}, but the gate policy's minimum is {minimum.canary_nodes} "
        f"canary and {minimum.control_nodes} control ({need} nodes), so its gate could only "
        "ever be inconclusive; leave it out of scope or lower the gate policy's [minimum]"
        for s in short[:SHOWN]
    ]
    if len(short) > SHOWN:
        reasons.append(f"and {len(short) - SHOWN} more strata under the gate policy's minimum")
    return reasons
