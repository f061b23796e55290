"""Maintenance windows per pool and per site in the planner (issue 27, item 4): an operator's
request is kept, audited with who asked and announced; plans put outages inside the windows,
and a window that cannot be met refuses the intent with the reason."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from lockstep_common.events.v1 import (
    MaintenanceWindowsChanged,
    MaintenanceWindowsRequested,
    RolloutHalted,
)
from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.maintenance import on_maintenance_requested
from tests.unit.planner.test_service import Rig, deliver, emitted

pytestmark = pytest.mark.unit


def request(scope: str, name: str, *windows: str, **fields: Any) -> MaintenanceWindowsRequested:
    return MaintenanceWindowsRequested(
        scope=scope,  # type: ignore[arg-type]
        name=name,
        windows=windows or None,
        requested_by=fields.pop("by", "alice"),
        **fields,
    )


async def test_a_request_is_kept_audited_with_who_asked_and_announced() -> None:
    rig = Rig()
    await deliver(rig.store, on_maintenance_requested, request("pool", "p0", "Sat 22:00-06:00"))
    await deliver(
        rig.store,
        on_maintenance_requested,
        request("pool", "p0", "sun 01:00-03:00", timezone="Europe/Berlin", by="bob"),
    )
    [row] = rig.store.tables.windows.values()
    assert (row.scope, row.name, row.windows, row.timezone, row.set_by) == (
        "pool",
        "p0",
        ("sun 01:00-03:00",),
        "Europe/Berlin",
        "bob",
    )
    lines = rig.store.audit_of("pool:p0")
    assert [(a.actor, a.action) for a in lines] == [
        ("alice", "windows set"),
        ("bob", "windows set"),
    ]
    assert "before: sat 22:00-06:00 (UTC)" in lines[1].detail
    changed = emitted(rig.store, MaintenanceWindowsChanged)
    assert [c.windows for c in changed] == [("sat 22:00-06:00",), ("sun 01:00-03:00",)]
    await deliver(rig.store, on_maintenance_requested, request("pool", "p0", by="carol"))
    assert rig.store.tables.windows == {}
    assert rig.store.audit_of("pool:p0")[-1].action == "windows cleared"
    assert emitted(rig.store, MaintenanceWindowsChanged)[-1].windows is None


async def test_outages_wait_for_the_pools_window() -> None:
    """The store's clock is Monday 12:00 UTC: nothing may go out of service before 22:00."""
    open_rig, night_rig = Rig(), Rig()
    await deliver(
        night_rig.store, on_maintenance_requested, request("pool", "p0", "daily 22:00-06:00")
    )
    plans = []
    for rig in (open_rig, night_rig):
        await rig.attest()
        rollout = await rig.submit(change_class=ChangeClass.STANDARD)
        plans.append(rig.store.tables.rollouts[rollout].plan)
    assert plans[0]["makespan_s"] < 10 * 3600
    assert plans[1]["makespan_s"] >= 10 * 3600 + plans[0]["makespan_s"] // 2
    assert plans[0]["estimates"][0]["start_s"] == plans[1]["estimates"][0]["start_s"] == 0


@pytest.mark.parametrize(
    "declared",
    [
        # A minute a night: no driver activation fits.
        [("pool", "p0", ("daily 22:00-22:01",))],
        # The pool's nights and its site's early mornings never overlap.
        [("pool", "p0", ("daily 22:00-02:00",)), ("site", "site-a", ("daily 03:00-05:00",))],
    ],
)
async def test_a_window_that_cannot_be_met_refuses_the_intent_with_the_reason(
    declared: list[tuple[str, str, tuple[str, ...]]],
) -> None:
    rig = Rig()
    for scope, name, windows in declared:
        await deliver(rig.store, on_maintenance_requested, request(scope, name, *windows))
    await rig.attest()
    rollout = await rig.submit(change_class=ChangeClass.STANDARD)
    assert rollout not in rig.store.tables.rollouts
    [halted] = emitted(rig.store, RolloutHalted)
    assert "pool p0: an outage of" in halted.reason
    assert "fits none of its maintenance windows" in halted.reason


async def test_a_site_window_alone_binds_every_pool_of_the_site() -> None:
    rig = Rig()
    await deliver(
        rig.store, on_maintenance_requested, request("site", "site-a", "daily 22:00-06:00")
    )
    await deliver(
        rig.store, on_maintenance_requested, request("site", "elsewhere", "mon 13:00-14:00")
    )
    await rig.attest()
    rollout = await rig.submit(change_class=ChangeClass.STANDARD)
    assert rig.store.tables.rollouts[rollout].plan["makespan_s"] >= 10 * 3600


async def test_the_worker_announces_the_windows_it_holds_when_it_starts() -> None:
    """The stream keeps 30 days: an updater with a fresh database learns older windows from
    this announcement, each with the time it was set (so an updater holding it changes nothing)."""
    rig = Rig()
    await deliver(rig.store, on_maintenance_requested, request("pool", "p0", "sat 22:00-06:00"))
    await deliver(rig.store, on_maintenance_requested, request("site", "site-a", "sun 01:00-02:00"))
    await deliver(rig.store, on_maintenance_requested, request("pool", "gone", "sun 01:00-02:00"))
    await deliver(rig.store, on_maintenance_requested, request("pool", "gone"))
    before = len(emitted(rig.store, MaintenanceWindowsChanged))
    rig.store.now += timedelta(days=45)
    await rig.worker.announce(rig.store)
    again = emitted(rig.store, MaintenanceWindowsChanged)[before:]
    assert [(c.scope, c.name, c.windows) for c in again] == [
        ("pool", "p0", ("sat 22:00-06:00",)),
        ("site", "site-a", ("sun 01:00-02:00",)),
    ]
    assert {c.set_at for c in again} == {rig.store.now - timedelta(days=45)}
