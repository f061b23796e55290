"""The executor's own blast-radius check, made right before every mutating action.

The planner decided the waves; the updater still refuses to act on anything the approved plan
does not cover (issue 12, "never outside the wave"; reliability.md section 3: the executor
re-checks instead of trusting its input). Pure: the facts are read by the caller in the same
transaction that records the action, so a halt committed before that read stops the action.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass


class Verdict(enum.StrEnum):
    """What the executor may do now."""

    PROCEED = "proceed"
    WAIT = "wait"
    """Not now, maybe later (the pool's out-of-service budget is spent)."""
    HALT = "halt"
    """The rollout halted or the wave's failure budget is spent: start nothing new."""
    REFUSE = "refuse"
    """This node may never be touched under this wave (outside it or outside the plan)."""


@dataclass(frozen=True, slots=True)
class Facts:
    """What the check needs, read in the action's transaction."""

    node_id: str
    halted: str | None
    """Why the rollout halted (``rollout.halted``, ``gate.tripped``, an abort), None if not."""
    wave_released: bool
    in_wave: bool
    """The node is one of the released wave's nodes."""
    in_plan: bool | None
    """The node is one of the approved plan's (``rollout.planned``); None: no plan seen.
    Membership, not the lists: a 12,500-node plan is not read at every action."""
    failures: int
    """Nodes of this wave that ended failed or quarantined."""
    failure_budget: int
    pool: str
    others_out: int
    """Other nodes of the same pool out of service now (cordoned by any rollout)."""
    max_unavailable: int
    wave: int | None = None
    """The wave the work item belongs to."""
    approved_wave: int | None = None
    """The wave the approved plan put the node in; None: a plan recorded without waves."""
    busy_with: str | None = None
    """Another open work item out of service on the node (a GSP runbook's remedy item)."""
    window_closed: str | None = None
    """Why the node's pool or site is outside its maintenance windows now (``windows``)."""


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str = ""


def decide(
    facts: Facts,
    *,
    takes_out_of_service: bool,
    rollback: bool = False,
    starts_work: bool = False,
) -> Decision:
    """May the next mutating action on ``facts.node_id`` start?

    ``takes_out_of_service``: the action leaves (or keeps) the node out of service, so the
    pool's budget applies; staging into an inactive bank does not. ``rollback``: the action
    flips a node of the wave back to its previous bank, which a halt (the tripped gate that
    asked for it) and a spent failure budget do not stop; every other check holds.
    ``starts_work``: the action begins the node's work (its preflight, its cordon), which
    waits while its pool's or site's maintenance windows are closed; once begun, the node's
    work finishes (``windows``), and a rollback is never held by them.
    """
    refusals = (
        (facts.halted is not None, Verdict.HALT, f"rollout halted: {facts.halted}"),
        (
            not facts.wave_released,
            Verdict.REFUSE,
            "the wave was not released (no wave.planned recorded)",
        ),
        (
            not facts.in_wave,
            Verdict.REFUSE,
            f"{facts.node_id} is not in the wave",
        ),
        (
            facts.in_plan is None,
            Verdict.REFUSE,
            "no approved plan (rollout.planned) for the rollout",
        ),
        (
            facts.in_plan is False,
            Verdict.REFUSE,
            f"{facts.node_id} is not in the approved plan",
        ),
        (
            facts.approved_wave is not None and facts.approved_wave != facts.wave,
            Verdict.REFUSE,
            f"{facts.node_id} is approved for wave {facts.approved_wave}, not wave {facts.wave}",
        ),
        (
            facts.failures > facts.failure_budget,
            Verdict.HALT,
            f"wave failure budget spent: {facts.failures} failed > {facts.failure_budget}",
        ),
        (
            starts_work and not rollback and facts.window_closed is not None,
            Verdict.WAIT,
            facts.window_closed or "",
        ),
        (
            takes_out_of_service and facts.busy_with is not None,
            Verdict.WAIT,
            f"{facts.node_id} is out of service for {facts.busy_with}",
        ),
        (
            takes_out_of_service and facts.others_out + 1 > facts.max_unavailable,
            Verdict.WAIT,
            f"pool {facts.pool or '(none)'} has {facts.others_out} node(s) out of service, "
            f"max_unavailable {facts.max_unavailable}",
        ),
    )
    # The first that applies wins: a halt outranks a refusal, a refusal outranks waiting.
    for applies, verdict, reason in refusals:
        if applies and not (rollback and verdict is Verdict.HALT):
            return Decision(verdict, reason)
    return Decision(Verdict.PROCEED)


@dataclass(frozen=True, slots=True)
class RemedyFacts:
    """What the check of a GSP runbook item (kind ``remedy``) needs: it belongs to no rollout,
    so only the node's other work and its pool bound it."""

    node_id: str
    pool: str
    in_rollout: str | None
    """A rollout with an open work item on the node (its wave was released), None if none."""
    others_out: int
    """Other nodes of the pool out of service now (any rollout's, any remedy's)."""
    remedies_out: int
    """Other remedy items of the pool out of service now."""


def decide_remedy(facts: RemedyFacts, *, budget: int, takes_out_of_service: bool) -> Decision:
    """May the next mutating action of a remedy on ``facts.node_id`` start?

    Never on a node inside a released rollout wave (the rollout's own steps come first, and may
    repair it: the planner moves a node whose GSP mismatch the bundle repairs). Taking the node
    out of service: one remedy at a time per pool (seed 004: "one node at a time"), and the
    pool's nodes out of service, every rollout's included, stay within ``budget``. A node
    drained by someone else is the scheduler's answer (``ForeignDrain``): left untouched.
    """
    if facts.in_rollout is not None:
        return Decision(
            Verdict.WAIT, f"{facts.node_id} is in a released wave of rollout {facts.in_rollout}"
        )
    if takes_out_of_service and facts.remedies_out > 0:
        return Decision(
            Verdict.WAIT,
            f"pool {facts.pool or '(none)'} has a GSP remedy out of service: one at a time",
        )
    if takes_out_of_service and facts.others_out + 1 > budget:
        return Decision(
            Verdict.WAIT,
            f"pool {facts.pool or '(none)'} has {facts.others_out} node(s) out of service, "
            f"remedy budget {budget}",
        )
    return Decision(Verdict.PROCEED)


def outside_plan(wave_nodes: tuple[str, ...], plan_nodes: frozenset[str]) -> tuple[str, ...]:
    """The wave's nodes the approved plan does not contain, in wave order."""
    return tuple(n for n in wave_nodes if n not in plan_nodes)


def outside_wave(
    wave: int, wave_nodes: tuple[str, ...], plan_waves: Mapping[str, int]
) -> tuple[str, ...]:
    """The wave's nodes the approved plan put in another wave, in wave order (reliability.md
    F3: a corrupted wave listing several times the approved wave's nodes). Nodes the mapping
    does not hold are ``outside_plan``'s concern."""
    return tuple(n for n in wave_nodes if plan_waves.get(n, wave) != wave)
