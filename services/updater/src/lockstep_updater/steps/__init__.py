"""The updater's steps as a table: ``STEPS`` maps each working state of ``domain.steps`` to the
module that runs it (issue 28 item 1).

A step is ``run(ctx, claim, node, progress, started)``: it reads and writes only through its
:class:`~lockstep_updater.steps.context.StepContext`, records into the item's typed progress
and ends by committing the next state (or raising ``Stop``/``NotYet`` for the executor to
commit). ``preflight`` differs by kind of work item (a rollout's update, its flip back, the
GSP runbook); every later step is shared. Each step declares where it may lead (``LEADS_TO``);
a unit test holds the table equal to ``domain.steps.ALLOWED``, the machine's one source (the
state diagram in docs/updater.md is drawn from it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from lockstep_common.events.v1 import FleetNode
from lockstep_updater.domain.progress import Progress
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps import (
    activating,
    awaiting_bmc,
    cordoning,
    draining,
    in_band,
    preflight,
    remedy,
    rollback,
    staging,
    uncordoning,
    verifying,
)
from lockstep_updater.steps.context import StepContext
from lockstep_updater.store import REMEDY, ROLLBACK, UPDATE, Claim

Run = Callable[[StepContext, Claim, FleetNode, Progress, float], Awaitable[None]]
"""``run(ctx, claim, node, progress, started)``; ``started``: the step's start on the
context's monotonic clock (device events carry the step's duration)."""


@dataclass(frozen=True, slots=True)
class Step:
    """One working state: what runs it (by kind of work item) and where it may lead."""

    leads_to: frozenset[NodeStep]
    run: Run
    by_kind: Mapping[str, Run] = field(default_factory=dict)
    """A kind's own run of the step, in place of ``run``."""

    def runner(self, kind: str) -> Run:
        return self.by_kind.get(kind, self.run)


S = NodeStep
STEPS: dict[NodeStep, Step] = {
    S.PREFLIGHT: Step(
        preflight.LEADS_TO,
        preflight.run,
        {UPDATE: preflight.run, ROLLBACK: rollback.run, REMEDY: remedy.run},
    ),
    S.STAGING: Step(staging.LEADS_TO, staging.run),
    S.CORDONING: Step(cordoning.LEADS_TO, cordoning.run),
    S.DRAINING: Step(draining.LEADS_TO, draining.run),
    S.ACTIVATING: Step(activating.LEADS_TO, activating.run),
    S.AWAITING_BMC: Step(awaiting_bmc.LEADS_TO, awaiting_bmc.run),
    S.VERIFYING: Step(verifying.LEADS_TO, verifying.run),
    S.IN_BAND: Step(in_band.LEADS_TO, in_band.run),
    S.UNCORDONING: Step(uncordoning.LEADS_TO, uncordoning.run),
}
"""The step each working state runs. ``pending`` has none (a claim moves it to preflight) and
the ends have none."""

__all__ = ["STEPS", "Run", "Step"]
