"""Maintenance windows per pool and per site, as operators set them (issue 27, item 4).

``lockstep pool set`` publishes ``maintenance.requested`` (only the ``cli`` identity may); the
planner is the one place they are kept: it replaces the pool's or site's windows, files the
change in the append-only audit trail under ``pool:<name>`` / ``site:<name>`` with who asked
and what was there before, and announces what it now holds as ``maintenance.changed``, which
the updater keeps to start no node's work outside them. The windows were checked when the
event was decoded (``MaintenanceWindowsRequested`` refuses what ``parse_schedule`` refuses),
so a hand-made event with a bad window is dead-lettered and changes nothing. ``requested_by``
is the operator's own word, as an intent's ``submitted_by`` is; what the bus guarantees is
that it came from the CLI's identity. When the planner starts it announces every pool's and
site's windows again (``announce_all``), so an updater with a fresh database learns them even
after the stream has dropped the original announcements.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from lockstep_common import subjects
from lockstep_common.envelope import Envelope
from lockstep_common.events.v1 import MaintenanceWindowsChanged, MaintenanceWindowsRequested
from lockstep_common.maintenance import Schedule, parse_schedule
from lockstep_planner.lifecycle import note
from lockstep_planner.store import PlannerTx, WindowsRow


def audit_key(scope: str, name: str) -> str:
    """Where a pool's or site's changes are filed (``lockstep rollout audit pool:NAME``)."""
    return f"{scope}:{name}"


def describe(row: WindowsRow | None) -> str:
    """A pool's or site's windows in words, for the audit trail."""
    if row is None:
        return "none (work may start at any time)"
    return f"{'; '.join(row.windows)} ({row.timezone})"


async def on_maintenance_requested(
    tx: PlannerTx, env: Envelope[MaintenanceWindowsRequested], *, now: datetime
) -> None:
    """Replace the windows of the pool or site, audit it, and announce what is held now."""
    data = env.data
    row = (
        None
        if data.windows is None
        else WindowsRow(
            data.scope,
            data.name,
            data.timezone,
            parse_schedule(data.windows, data.timezone).texts,
            data.requested_by,
            now,
        )
    )
    before = await tx.set_maintenance(data.scope, data.name, row)
    await note(
        tx,
        audit_key(data.scope, data.name),
        data.requested_by,
        "windows set" if row is not None else "windows cleared",
        f"{data.scope} {data.name}: {describe(row)}; before: {describe(before)} "
        f"(request {env.event_id} from {env.source})",
        now,
    )
    tx.events.emit(
        subjects.maintenance_changed(),
        MaintenanceWindowsChanged(
            scope=data.scope,
            name=data.name,
            timezone=data.timezone,
            windows=row.windows if row is not None else None,
            set_by=data.requested_by,
            set_at=now,
        ),
        about=audit_key(data.scope, data.name),
        correlation_id=str(env.event_id),
    )


async def announce_all(tx: PlannerTx) -> int:
    """Announce every pool's and site's windows again, each as it was set (same ``set_at``):
    the MAINTENANCE stream keeps 30 days, so an updater started with an empty database would
    otherwise never hear of windows set before that, and start work outside them. An updater
    that holds them already changes nothing (it keeps the latest ``set_at``). Returns how many."""
    rows = await tx.maintenance()
    for row in rows:
        tx.events.emit(
            subjects.maintenance_changed(),
            MaintenanceWindowsChanged(
                scope=row.scope,  # type: ignore[arg-type]
                name=row.name,
                timezone=row.timezone,
                windows=row.windows,
                set_by=row.set_by,
                set_at=row.set_at,
            ),
            about=audit_key(row.scope, row.name),
        )
    return len(rows)


def schedules(rows: Iterable[WindowsRow]) -> dict[tuple[str, str], Schedule]:
    """(scope, name) -> the schedule, for planning."""
    return {(r.scope, r.name): parse_schedule(r.windows, r.timezone) for r in rows}
