"""The promises a rollout keeps under chaos (reliability.md section 7, family I), as checks over
one observation of the world: each returns the violations it finds, in words.

The physical truth is the simulator's: each BMC's ledger of calls (with the node's scheduler
state and the wall-clock instant it took each one) and the scheduler's drains. The services'
own records (the updater's work items, the planner's waves, the healthgate's verdicts) say what
Lockstep believed; a violation is where the two disagree with a promise.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from lockstep_updater.ports import OWNER

PUSHES = frozenset({"update-multipart", "UpdateService.SimpleUpdate"})
# Calls that change what a node runs: an A/B activation, a reset applying staged images. A push
# with ``Stage: true`` writes the idle bank while the node works (impactless staging); one
# without it flashes at once, so it counts as a flash too.
FLASHES = frozenset(
    {
        "UpdateService.Activate",
        "SoftwareInventory.Activate",
        "ComputerSystem.Reset",
        "Manager.Reset",
    }
)
NOT_A_TOUCH = frozenset({"session_create", "session_delete", "fault"})
TERMINAL_STEPS = frozenset({"done", "cancelled", "failed", "quarantined"})
# A rollout's state may only move forward once it stopped: halted may still be closed (aborted).
FINAL_ROLLOUT: dict[str, frozenset[str]] = {
    "completed": frozenset({"completed"}),
    "aborted": frozenset({"aborted"}),
    "halted": frozenset({"halted", "aborted"}),
}
Entry = dict[str, Any]


@dataclass
class Program:
    """One generated program: its rollout, where the ledgers stood when it began, what the
    earlier checks saw (for "never regress") and what the 50 ms sampler found."""

    number: int
    intent_id: uuid.UUID
    ledger_start: dict[str, int]
    started_at: float
    rollout_id: str | None = None
    refused: bool = False
    reasons: list[str] = field(default_factory=list)
    sampled: list[str] = field(default_factory=list)
    seen_steps: dict[str, str] = field(default_factory=dict)
    seen_rollout: str | None = None


@dataclass
class Observation:
    """The world as one check sees it."""

    work: dict[str, tuple[int, str, str]]
    """node -> (wave, step, reason) of the updater's update work item for this rollout."""
    rollbacks: dict[str, tuple[int, str, str]]
    """node -> (wave, step, reason) of its flip-back work item (a tripped gate's canary)."""
    rollout_state: str | None
    waves: dict[int, tuple[str, ...]]
    """wave -> its nodes, from the planner's ``wave.planned`` events."""
    gates: list[tuple[str, int, float]]
    """(verdict, wave, committed at) of the healthgate's ``gate.*`` events."""
    ledgers: dict[str, list[Entry]]
    """node -> its BMC's ledger entries since the program began."""
    cordoned: dict[str, str]
    """node -> pool of every node the scheduler has drained by Lockstep."""
    quarantined: frozenset[str]
    max_unavailable: int
    attested_sha384: frozenset[str]
    at_rest: bool = False

    def summary(self) -> str:
        steps = Counter(step for _, step, _ in self.work.values())
        return f"rollout {self.rollout_state}, steps {dict(steps)}"


def _accepted(entry: Entry) -> bool:
    return 200 <= int(entry.get("status", 0)) < 300


def _pushes(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if e["action"] in PUSHES and e.get("status") == 202]


def one_push_per_version(obs: Observation) -> list[str]:
    """1. At most one accepted push per node per target version."""
    out = []
    for node, entries in obs.ledgers.items():
        versions = Counter(tuple(sorted(set(e.get("plan", {}).values()))) for e in _pushes(entries))
        out += [
            f"{node}: {n} accepted pushes of version {'/'.join(v) or '(none)'}"
            for v, n in versions.items()
            if n > 1
        ]
    return out


def flashed_only_when_drained(obs: Observation) -> list[str]:
    """2. No node flashing unless Lockstep drained it (the scheduler's state when the BMC took
    the call; the sampler checks running activations between calls)."""
    out = []
    for node, entries in obs.ledgers.items():
        for e in entries:
            flash = e["action"] in FLASHES or (e["action"] in PUSHES and e.get("stage") is False)
            if not (flash and _accepted(e)):
                continue
            if e.get("scheduler_state") != "drained" or e.get("drained_by") != OWNER:
                out.append(
                    f"{node}: {e['action']} accepted while {e.get('scheduler_state')} "
                    f"(drained by {e.get('drained_by')})"
                )
    return out


def within_budget(obs: Observation) -> list[str]:
    """3. Nodes out of service per pool within ``max_unavailable`` (quarantined nodes stay
    cordoned by design and are the failure budget's concern)."""
    pools = Counter(pool for node, pool in obs.cordoned.items() if node not in obs.quarantined)
    return [
        f"pool {pool}: {n} nodes out of service > max_unavailable {obs.max_unavailable}"
        for pool, n in pools.items()
        if n > obs.max_unavailable
    ]


def waves_in_order(obs: Observation) -> list[str]:
    """4. No node of wave k+1 touched (any mutating BMC call) before wave k's gate passed."""
    passed: dict[int, float] = {}
    for verdict, wave, at in obs.gates:
        if verdict == "passed":
            passed[wave] = min(at, passed.get(wave, at))
    out = []
    for wave, nodes in sorted(obs.waves.items()):
        if wave == 0:
            continue
        gate = passed.get(wave - 1)
        for node in nodes:
            touches = [e for e in obs.ledgers.get(node, []) if e["action"] not in NOT_A_TOUCH]
            if touches and (gate is None or touches[0]["at"] < gate):
                when = "before it passed" if gate is not None else "and it never passed"
                out.append(
                    f"{node} of wave {wave} got {touches[0]['action']} while wave {wave - 1}'s "
                    f"gate had not passed ({when})"
                )
    return out


def never_regress(program: Program, obs: Observation) -> list[str]:
    """5. Terminal states never regress: a node's ended work item, a stopped rollout, and a
    wave's verdict (one per wave, ever)."""
    out = []
    items = [(node, "work item", work) for node, work in obs.work.items()]
    items += [(node, "flip-back item", work) for node, work in obs.rollbacks.items()]
    for node, what, (_, step, _) in items:
        key = f"{node} {what}"  # a node's update and flip-back items are two state machines
        before = program.seen_steps.get(key)
        if before in TERMINAL_STEPS and step != before:
            out.append(f"{node}: {what} went from {before} back to {step}")
        program.seen_steps[key] = step
    before_rollout = program.seen_rollout
    if before_rollout in FINAL_ROLLOUT and obs.rollout_state not in FINAL_ROLLOUT[before_rollout]:
        out.append(f"rollout went from {before_rollout} to {obs.rollout_state}")
    if obs.rollout_state is not None:
        program.seen_rollout = obs.rollout_state
    verdicts = Counter(wave for _, wave, _ in obs.gates)
    out += [f"wave {w}: {n} gate verdicts" for w, n in verdicts.items() if n > 1]
    return out


def nothing_cordoned_without_reason(obs: Observation) -> list[str]:
    """6. At rest, a node Lockstep keeps drained has a work item (its update or its flip-back)
    that ended failed or quarantined, with the reason."""
    if not obs.at_rest:
        return []
    out = []
    for node in sorted(obs.cordoned):
        ended = [w for w in (obs.work.get(node), obs.rollbacks.get(node)) if w is not None]
        if not any(step in ("failed", "quarantined") and reason for _, step, reason in ended):
            shown = "; ".join(f"{step} {reason!r}" for _, step, reason in ended)
            out.append(f"{node}: left drained by Lockstep at rest, work item {shown or '(none)'}")
    return out


def staged_from_attested(obs: Observation) -> list[str]:
    """7. Every image a BMC accepted is one an attested bundle names (its SHA-384)."""
    return [
        f"{node}: accepted an image with SHA-384 {e.get('sha384', '?')[:16]}... "
        "no attested bundle names"
        for node, entries in obs.ledgers.items()
        for e in _pushes(entries)
        if e.get("sha384") not in obs.attested_sha384
    ]


def violations(program: Program, obs: Observation) -> list[str]:
    """Every invariant over one observation, plus what the sampler saw since the last check."""
    found = [
        *one_push_per_version(obs),
        *flashed_only_when_drained(obs),
        *within_budget(obs),
        *waves_in_order(obs),
        *never_regress(program, obs),
        *nothing_cordoned_without_reason(obs),
        *staged_from_attested(obs),
        *program.sampled,
    ]
    program.sampled.clear()
    return found
