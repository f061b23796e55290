"""When a ``drift.detected`` starts the GSP / driver runbook (seed 004, issue 12 item 5): the
policy, and what a drift event asks for. Pure: no I/O, no clock.

Policy (``LOCKSTEP_UPDATER_GSP_REMEDY``):

- ``automatic`` (the default): a node whose loaded module has no matching GSP firmware has
  already lost its GPUs (``RmInitAdapter failed``, XID 79, DCGM fails): it runs no GPU work, so
  draining it costs nothing a human would weigh, and every hour waiting for approval is a dead
  node. The repair is the documented one (pinned branch as one unit, one node at a time per
  pool, inside the pool's out-of-service budget, never inside a rollout's wave), with a
  fallback and an escalation that stops on a second failure; it is the kind of single-node
  auto-repair SREs expect to be on (as node auto-repair is on by default in managed Kubernetes).
- ``approval``: the item is recorded and held until ``lockstep node approve-remedy NODE``.
- ``off``: drift is only reported, as before.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from lockstep_common.events.v1 import DriftItem
from lockstep_common.vocabulary import Component, DriftKind

REMEDY_PREFIX = "remedy-"
"""A remedy item's ``rollout_id`` is this and 12 hex digits of the drift event's id: a subject
token like a rollout id (its device events' subject), and never a rollout's."""


class RemedyPolicy(enum.StrEnum):
    AUTOMATIC = "automatic"
    APPROVAL = "approval"
    OFF = "off"


class Intake(enum.StrEnum):
    RUN = "run"
    """Record a remedy item the worker may claim now."""
    HOLD = "hold"
    """Record it, held until approved."""
    IGNORE = "ignore"


@dataclass(frozen=True, slots=True)
class Decision:
    intake: Intake
    reason: str
    pin: str | None = None
    """The driver version the node is pinned to, when the drift names it."""


def intake(policy: RemedyPolicy, items: Iterable[DriftItem]) -> Decision:
    """What a ``drift.detected`` with ``items`` asks of the runbook under ``policy``."""
    items = tuple(items)
    if not any(i.kind is DriftKind.GSP_MISMATCH for i in items):
        return Decision(Intake.IGNORE, "no gsp_mismatch item")
    if policy is RemedyPolicy.OFF:
        return Decision(Intake.IGNORE, "gsp_mismatch: the runbook is off (policy off)")
    pin = next(
        (i.expected for i in items if i.component is Component.DRIVER and i.expected),
        None,
    )
    if policy is RemedyPolicy.APPROVAL:
        return Decision(Intake.HOLD, "gsp_mismatch: waiting for approval", pin)
    return Decision(Intake.RUN, "gsp_mismatch: runbook started", pin)


def remedy_id(event_id_hex: str) -> str:
    """The remedy item's id (``rollout_id`` column) from the drift event's UUID hex."""
    return REMEDY_PREFIX + event_id_hex[:12]
