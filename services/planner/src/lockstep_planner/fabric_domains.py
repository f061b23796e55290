"""What the planner does with fabric domains (seed 002; issue 10, deliverable 6): learn them and
their occupancy, let a rollout claim them, provision them wave by wave, and let them go.

The state machine is ``domain.fabric``; this module reads and writes the rows
(``PlannerTx.fabric_domains`` / ``save_fabric``) and files every change in the audit trail
under ``fabric:<domain>``. A rollout's plan names the domains it moves (``plan["fabric"]``,
written by ``planning``), so nothing here needs the fleet except :func:`sync`.

Occupancy comes from the scheduler (``store.Occupancy``), polled by the worker: the scheduler
is where jobs are placed, so asking it is level-triggered (a restart or a lost message loses
nothing; the next poll says what runs now), where prolog/epilog events would need their own
delivery guarantees and replay to rebuild the same set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from lockstep_common.events.v1 import FleetNode
from lockstep_common.vocabulary import clip_text
from lockstep_planner.domain.fabric import (
    FabricConflict,
    FabricDomain,
    Lifecycle,
    abandon_update,
    can_start_update,
    claim,
    finish_update,
    observe,
    observed_at,
    pin,
    release_claim,
    start_update,
)
from lockstep_planner.store import FABRIC_KEY, AuditEntry, FabricRow, PlannerTx, RolloutRow

SCHEDULER = "scheduler"
INVENTORY = "inventory"
PLANNER = "planner"


def fresh(domain_id: str) -> FabricDomain:
    """A domain seen for the first time: nothing known installed, nothing pinned."""
    return FabricDomain(domain_id, current=None, target=None)


async def note(
    tx: PlannerTx, domain_id: str, actor: str, action: str, detail: str, now: datetime
) -> None:
    """One audit line about a domain (``lockstep rollout audit fabric:<domain>``)."""
    await tx.audit(AuditEntry(FABRIC_KEY + domain_id, now, actor, action, clip_text(detail)))


def change(
    row: FabricRow | None,
    domain: FabricDomain,
    *,
    by: str,
    now: datetime,
    action: str,
    detail: str,
    node_ids: Sequence[str] | None = None,
) -> tuple[FabricRow, AuditEntry]:
    """The domain's new row with who changed it, and the audit line saying so."""
    nodes = tuple(node_ids) if node_ids is not None else (row.node_ids if row else ())
    saved = FabricRow(domain, nodes, by, now)
    entry = AuditEntry(
        FABRIC_KEY + domain.id,
        now,
        by,
        action,
        clip_text(
            f"{detail}; now {domain.lifecycle.value}, {domain.update_state.value} "
            f"({domain.update_reason})"
        ),
    )
    return saved, entry


async def save(
    tx: PlannerTx,
    row: FabricRow | None,
    domain: FabricDomain,
    *,
    by: str,
    now: datetime,
    action: str,
    detail: str,
    node_ids: Sequence[str] | None = None,
) -> FabricRow:
    """Store the domain's new state with who changed it, and audit the change."""
    saved, entry = change(
        row, domain, by=by, now=now, action=action, detail=detail, node_ids=node_ids
    )
    await tx.save_fabric(saved)
    await tx.audit(entry)
    return saved


async def sync(
    tx: PlannerTx, fleet: Iterable[FleetNode], busy: frozenset[str] | None, now: datetime
) -> set[str]:
    """Bring every domain of the fleet up to date: its nodes, and (when ``busy`` is known)
    whether a job occupies it. Returns the rollouts holding a domain that just became
    AVAILABLE, whose waiting wave may now be released."""
    members: dict[str, list[str]] = {}
    for node in fleet:
        if node.fabric_domain:
            members.setdefault(node.fabric_domain, []).append(node.node_id)
    rows = await tx.fabric_domains(members)
    freed: set[str] = set()
    # Written together at the end: at 2,000 domains, a statement per domain was most of an
    # intent's planning time (issue 27, item 3).
    saved: dict[str, FabricRow] = {}
    lines: list[AuditEntry] = []
    for domain_id, nodes in sorted(members.items()):
        ids = tuple(sorted(nodes))
        row = rows.get(domain_id)
        if row is None:
            row, line = change(
                None,
                fresh(domain_id),
                by=INVENTORY,
                now=now,
                action="discovered",
                detail=f"{len(ids)} node(s) in the fleet",
                node_ids=ids,
            )
            saved[domain_id] = row
            lines.append(line)
        domain = row.domain
        if busy is not None:
            jobs = sorted(set(ids) & busy)
            seen = observe(domain, occupied=bool(jobs))
            if seen.lifecycle is not domain.lifecycle:
                detail = (
                    f"a job runs on {', '.join(jobs[:5])}{' ...' if len(jobs) > 5 else ''}"
                    if jobs
                    else "no job runs on any of its nodes"
                )
                action = "occupied" if jobs else "available"
                row, line = change(row, seen, by=SCHEDULER, now=now, action=action, detail=detail)
                saved[domain_id] = row
                lines.append(line)
                if seen.lifecycle is Lifecycle.AVAILABLE and seen.rollout is not None:
                    freed.add(seen.rollout)
        if row.node_ids != ids:
            saved[domain_id] = dataclasses.replace(row, node_ids=ids)
    await tx.save_fabric(*saved.values())
    await tx.audit(*lines)
    return freed


def fabric_plan(rollout: RolloutRow) -> dict[str, Any]:
    """What the plan says about fabric domains: ``domains`` (domain -> nodes it moves, deferred
    ones included), ``at_target`` (domains already on the bundle), ``deferred`` (wave -> the
    domain that waits in it and why). Empty when the bundle moves no switch firmware."""
    found = rollout.plan.get("fabric")
    return found if isinstance(found, dict) else {}


def domains_in(rollout: RolloutRow, node_ids: Iterable[str]) -> list[str]:
    """The fabric domains of ``rollout`` that ``node_ids`` touch."""
    wanted = set(node_ids)
    domains: dict[str, list[str]] = fabric_plan(rollout).get("domains", {})
    return sorted(d for d, nodes in domains.items() if wanted.intersection(nodes))


async def claim_all(tx: PlannerTx, rollout: RolloutRow, by: str, now: datetime) -> list[str]:
    """The rollout starts: pin every domain it moves to its bundle and hold it, and record the
    ones already on it. Returns the conflicts (nothing is claimed when there is one)."""
    plan = fabric_plan(rollout)
    moving: list[str] = sorted(plan.get("domains", {}))
    at_target: list[str] = sorted(plan.get("at_target", ()))
    rows = await tx.fabric_domains([*moving, *at_target])
    claimed: list[tuple[FabricRow | None, FabricDomain]] = []
    conflicts = []
    for domain_id in moving:
        row = rows.get(domain_id)
        try:
            domain = claim(
                row.domain if row else fresh(domain_id), rollout.stack_hash, rollout.rollout_id
            )
        except FabricConflict as exc:
            conflicts.append(str(exc))
        else:
            claimed.append((row, domain))
    if conflicts:
        return conflicts
    saved: list[FabricRow] = []
    lines: list[AuditEntry] = []
    for row, domain in claimed:
        made = change(
            row,
            domain,
            by=by,
            now=now,
            action="pinned",
            detail=f"rollout {rollout.rollout_id} pins it to {rollout.stack_hash}",
            node_ids=plan["domains"][domain.id] if row is None else None,
        )
        saved.append(made[0])
        lines.append(made[1])
    for domain_id in at_target:
        row = rows.get(domain_id)
        before = row.domain if row else fresh(domain_id)
        after = observed_at(before, rollout.stack_hash)
        if after != before:
            made = change(
                row,
                after,
                by=PLANNER,
                now=now,
                action="at target",
                detail=f"every node runs {rollout.stack_hash} already ({rollout.rollout_id})",
            )
            saved.append(made[0])
            lines.append(made[1])
    await tx.save_fabric(*saved)
    await tx.audit(*lines)
    return []


async def before_release(
    tx: PlannerTx, rollout: RolloutRow, node_ids: Sequence[str], now: datetime
) -> list[str]:
    """A wave of ``rollout`` is about to be released: if a job occupies one of its domains,
    return those (the wave waits: it never includes nodes of an OCCUPIED domain); otherwise
    start provisioning each of its domains and return []."""
    touched = domains_in(rollout, node_ids)
    if not touched:
        return []
    rows = await tx.fabric_domains(touched)
    busy = [d for d in touched if d in rows and rows[d].domain.lifecycle is Lifecycle.OCCUPIED]
    if busy:
        return busy
    for domain_id in touched:
        row = rows.get(domain_id)
        if row is None or row.domain.rollout != rollout.rollout_id:
            continue
        if can_start_update(row.domain):
            await save(
                tx,
                row,
                start_update(row.domain),
                by=PLANNER,
                now=now,
                action="provisioning",
                detail=f"rollout {rollout.rollout_id} releases its nodes",
            )
    return []


async def wave_failures(
    tx: PlannerTx, rollout: RolloutRow, wave: int, failed: Sequence[str], now: datetime
) -> None:
    """Nodes of a wave failed within its failure budget: the rollout goes on, but a domain
    holding a failed node does not run the bundle as a whole (seed 002: a domain's ``current``
    is what all of it runs), so its update ends with the bundle unknown, its target still
    pinned (WILL_UPDATE) for a later rollout, instead of being marked updated when the wave
    passes."""
    for row in (await tx.fabric_domains(domains_in(rollout, failed))).values():
        if row.domain.rollout != rollout.rollout_id:
            continue
        if row.domain.lifecycle is not Lifecycle.PROVISIONING:
            continue
        mine = sorted(set(failed).intersection(row.node_ids))
        await save(
            tx,
            row,
            abandon_update(row.domain),
            by=PLANNER,
            now=now,
            action="update incomplete",
            detail=f"rollout {rollout.rollout_id} wave {wave}: "
            f"{', '.join(mine[:10]) or 'its nodes'} failed",
        )


async def after_wave(
    tx: PlannerTx, rollout: RolloutRow, node_ids: Sequence[str], now: datetime
) -> None:
    """A wave passed its gate and soak: its domains run the rollout's bundle now."""
    touched = domains_in(rollout, node_ids)
    for row in (await tx.fabric_domains(touched)).values():
        if row.domain.rollout == rollout.rollout_id and row.domain.lifecycle is (
            Lifecycle.PROVISIONING
        ):
            await save(
                tx,
                row,
                finish_update(row.domain),
                by=PLANNER,
                now=now,
                action="updated",
                detail=f"rollout {rollout.rollout_id}: its wave passed the gate",
            )


async def let_go(tx: PlannerTx, rollout: RolloutRow, why: str, now: datetime) -> None:
    """The rollout halted or was aborted: every domain it holds is let go; one it was
    provisioning ends with its bundle unknown (the target stays pinned)."""
    touched = sorted(fabric_plan(rollout).get("domains", {}))
    for row in (await tx.fabric_domains(touched)).values():
        if row.domain.rollout != rollout.rollout_id:
            continue
        provisioning = row.domain.lifecycle is Lifecycle.PROVISIONING
        after = abandon_update(row.domain) if provisioning else release_claim(row.domain)
        await save(
            tx,
            row,
            after,
            by=PLANNER,
            now=now,
            action="update abandoned" if provisioning else "released",
            detail=f"rollout {rollout.rollout_id} stopped: {why}",
        )


async def pin_domain(tx: PlannerTx, domain_id: str, bundle: str, by: str, now: datetime) -> str:
    """``lockstep fabric pin``: set the domain's target, or refuse with the conflict. The
    outcome is the command's (``done`` or ``refused: <why>``); a refusal is audited too."""
    row = (await tx.fabric_domains([domain_id])).get(domain_id)
    if row is None:
        return f"refused: no fabric domain {domain_id}"
    if await tx.bundle(bundle) is None:
        return f"refused: bundle with stack {bundle} is not attested"
    try:
        pinned = pin(row.domain, bundle)
    except FabricConflict as exc:
        await note(tx, domain_id, by, "pin refused", str(exc), now)
        return f"refused: {exc}"
    if pinned == row.domain:
        return "done; already pinned to it"
    await save(tx, row, pinned, by=by, now=now, action="pinned", detail=f"pinned to {bundle}")
    return "done"
