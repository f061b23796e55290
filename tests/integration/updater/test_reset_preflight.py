"""Preflight asks the BMC whether it takes the profile's activation reset before anything is
drained or written (issue 29 item 3): the reset action's ``ResetType@Redfish.AllowableValues``
on each shipped dialect of the simulator (the Supermicro dialect advertises its capture's
``GracefulRestart`` only). A BMC that does not allow the profile's reset type is refused with
one line naming the BMC, the profile and the reset; nothing is written, nothing drained."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lockstep_sim import systems
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.ports import OWNER
from tests.integration.updater.conftest import World
from tests.integration.updater.test_dialect_rollouts import (
    LOGINS,
    Case,
    _plan,
    _release,
    dialect_world,
)

pytestmark = pytest.mark.integration
__all__ = ["dialect_world"]  # the fixture, shared with the dialect rollouts
NODE = "node-00000"


async def test_a_bmc_that_does_not_allow_the_profiles_reset_type_is_refused_before_any_drain(
    dialect_world: tuple[World, Case, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    w, case, sent = dialect_world
    others = ("On", "ForceOff")  # what the BMC allows now: not the profile's reset type
    bmc = w.rt.simulator.bmc(NODE)
    if case.reset == "Manager.Reset":
        bmc.dialect = dataclasses.replace(bmc.dialect, manager_reset_types=others)
    elif case.reset == "Chassis.Reset":
        bmc.dialect = dataclasses.replace(bmc.dialect, chassis_reset_types=others)
    else:
        monkeypatch.setattr(systems, "RESET_TYPES", list(others))
    before = {m: c.version for m, c in bmc.node.components.items()}
    await _plan(w, case, [(NODE,)])
    await _release(w, case, 0, (NODE,))
    await w.settle()

    item = w.store.item(NODE)
    assert item.state is NodeStep.FAILED
    assert item.reason.startswith(f"refused: BMC {NODE} (profile {case.dialect}): ")
    assert f"ResetType {case.reset_type!r} not allowed (On, ForceOff)" in item.reason
    assert "\n" not in item.reason and item.reason.endswith("; nothing written")
    assert [e for e in bmc.ledger if e["action"] not in LOGINS] == []
    assert sent == []
    assert {m: c.version for m, c in bmc.node.components.items()} == before
    assert [e for e in w.rt.scheduler.ledger if e.node_id == NODE and e.by == OWNER] == []
