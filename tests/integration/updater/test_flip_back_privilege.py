"""A Supermicro flip-back (``inactive_image``) PATCHes ``Managers/1``'s
``Links.ActiveSoftwareImage`` and sends ``Manager.Reset``, which the DSP8011 privilege registry
gives to ConfigureManager: an account without it (the Operator role the updater flashes with)
is refused in the flip-back's preflight with one line, before any drain or write (issue 29
item 3), instead of being refused by the BMC (403) once the node is drained."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from lockstep_sim.options import OPERATOR_USERNAME
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.ports import OWNER
from tests.integration.updater.conftest import World
from tests.integration.updater.test_flip_back import (
    NEW_BMC,
    dialect_world,
    supermicro_tripped,
    writes,
)

pytestmark = pytest.mark.integration
__all__ = ["dialect_world"]


async def test_a_flip_back_by_an_account_without_configure_manager_is_refused_before_the_drain(
    dialect_world: Callable[[str, str], Awaitable[World]],
) -> None:
    async def as_operator(dialect: str, hardware: str) -> World:
        """The Supermicro world with the flashing account demoted to the predefined Operator
        role (its own is FirmwareOperator, which holds ConfigureManager)."""
        w = await dialect_world(dialect, hardware)
        for node in w.rt.fleet:
            account = w.rt.simulator.bmc(node.id).accounts.by_name(OPERATOR_USERNAME)
            assert account is not None
            account.role = "Operator"
        return w

    tripped = await supermicro_tripped(as_operator)
    w, node, old, flip = tripped.w, tripped.node, tripped.old, tripped.flip
    bmc = w.rt.simulator.bmc(node).node.components["BMC"]
    assert flip.state is NodeStep.FAILED
    assert flip.reason == (
        f"refused: BMC {node} (profile supermicro-x13): the account lacks what the flip-back "
        "needs (DSP8011: ConfigureManager for /redfish/v1/Managers/1; it holds: "
        "ConfigureComponents, ConfigureSelf, Login); nothing written"
    )
    assert writes(w, node) == []
    assert bmc.version == NEW_BMC and bmc.inactive_version == old
    assert [e for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER] == []
