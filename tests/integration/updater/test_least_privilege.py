"""Least privilege on the simulator (reliability.md 7 H5): the updater flashes with the BMC's
Operator-class account and refuses an Administrator-class one at preflight, before any write;
the role is read from the session (Session v1_7_0 ``Roles``) or, on a BMC whose sessions name
none, from the account in AccountService."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lockstep_common.vocabulary import Component
from lockstep_sim import sessions
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, OPERATOR_USERNAME, SimOptions
from lockstep_sim.profiles import GB200
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.ports import OWNER
from lockstep_updater.testing.memory_store import MemoryStore
from lockstep_updater.testing.sim_fleet import SimFacts, sim_executor
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION, package_for
from tests.integration.updater.conftest import ENV, FAST, STACK, World, attest_image
from tests.integration.updater.test_executor_sim import nodes_of, plan_and_release

pytestmark = pytest.mark.integration
NEW_BMC = "GB200Nvl-25.03-1"
ADMIN_ENV = {"SIMBMC_USERNAME": DEFAULT_USERNAME, "SIMBMC_PASSWORD": DEFAULT_PASSWORD}


def without_roles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions as BMCs before Session v1_7_0 show them: no ``Roles``."""
    plain = sessions.session_doc

    def doc(session: sessions.Session) -> dict[str, Any]:
        return {k: v for k, v in plain(session).items() if k != "Roles"}

    monkeypatch.setattr(sessions, "session_doc", doc)


async def update_one_node(
    w: World, monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], *, roles_in_session: bool
) -> str:
    if not roles_in_session:
        without_roles(monkeypatch)
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    await w.settle(sim_executor(w.rt, w.store, w.facts, w.bundle, FAST, environ))
    return node


@pytest.mark.parametrize("roles_in_session", [True, False])
async def test_an_administrator_account_is_refused_at_preflight_and_nothing_is_written(
    world: World, monkeypatch: pytest.MonkeyPatch, roles_in_session: bool
) -> None:
    w = world
    node = await update_one_node(w, monkeypatch, ADMIN_ENV, roles_in_session=roles_in_session)
    item = w.store.item(node)
    assert item.state is NodeStep.FAILED
    assert "(Administrator) holds ConfigureManager and ConfigureUsers" in item.reason
    assert "more than the profile's calls need" in item.reason
    assert "use an account whose role holds only ConfigureComponents, Login" in item.reason
    assert "nothing written" in item.reason
    assert w.pushes(node) == []
    # The BMC recorded logins and logouts only: no push, activation or reset.
    actions = {e["action"] for e in w.rt.simulator.bmc(node).ledger}
    assert actions == {"session_create", "session_delete"}


@pytest.mark.parametrize("roles_in_session", [True, False])
async def test_the_operator_account_flashes(
    world: World, monkeypatch: pytest.MonkeyPatch, roles_in_session: bool
) -> None:
    w = world
    node = await update_one_node(w, monkeypatch, ENV, roles_in_session=roles_in_session)
    assert w.store.item(node).state is NodeStep.DONE
    assert w.gpu_versions(node) == {NEW_GPU_VERSION}
    (push,) = w.pushes(node)
    assert push["stage"] is True
    assert w.rt.simulator.bmc(node).sessions.by_token == {}  # every session closed


@pytest.fixture
async def supermicro(tmp_path: Path) -> AsyncIterator[World]:
    """Two Supermicro-dialect BMCs (profile supermicro-x13: activation by ``Manager.Reset``)
    and a bundle with a BMC image for them."""
    bundle = tmp_path / "bundle"
    bmc = next(c for c in GB200 if c.kind == "bmc")
    image = package_for(bmc, NEW_BMC)
    attested = attest_image(bundle, "bmc.fwpkg", image, Component.BMC, NEW_BMC)
    options = SimOptions(2, "gb200", dialect="supermicro-x13", time_scale=0.002, port=0)
    rt = FleetRuntime(replace(options, host_base="127.78.0.1"), scheduler_port=0)
    await rt.start()
    store = MemoryStore()
    async with store.transaction() as tx:
        await tx.record_bundle(STACK, str(bundle), (attested,))
    w = World(rt, store, SimFacts(rt, credentials="SIMBMC"), bundle, attested)
    try:
        yield w
    finally:
        for ex in w.executors:
            await ex.close()
        await rt.stop()


async def test_supermicro_refuses_an_operator_before_the_drain(supermicro: World) -> None:
    """DSP8011 gives ``Manager.Reset`` (the profile's activation) to ConfigureManager: the
    predefined Operator is refused in preflight, naming the privilege and the call, with nothing
    written to the BMC or asked of the scheduler."""
    w = supermicro
    (operator,) = nodes_of(w, 1)
    account = w.rt.simulator.bmc(operator).accounts.by_name(OPERATOR_USERNAME)
    assert account is not None
    account.role = "Operator"
    await plan_and_release(w, (operator,), components=(Component.BMC,))
    await w.settle()
    refused = w.store.item(operator)
    assert refused.state is NodeStep.FAILED
    assert refused.reason == (
        f"refused: BMC {operator} (profile supermicro-x13): the account (Operator) lacks what "
        "the profile's calls need (DSP8011: ConfigureManager for Manager.Reset of "
        "/redfish/v1/Managers/1, the flip-back's PATCH of a Manager's image link; it holds: "
        "ConfigureComponents, ConfigureSelf, Login); nothing written"
    )
    actions = {e["action"] for e in w.rt.simulator.bmc(operator).ledger}
    assert actions == {"session_create", "session_delete"}
    assert [e for e in w.rt.scheduler.ledger if e.node_id == operator and e.by == OWNER] == []


async def test_supermicro_flashes_with_the_least_role_that_may_reset_its_manager(
    supermicro: World,
) -> None:
    """The simulator's flashing account on this dialect: FirmwareOperator (Operator and
    ConfigureManager, no ConfigureUsers) passes preflight and activates with Manager.Reset."""
    w = supermicro
    (least,) = nodes_of(w, 1)
    await plan_and_release(w, (least,), components=(Component.BMC,))
    await w.settle()
    flashed = w.store.item(least)
    assert flashed.state is NodeStep.DONE, flashed.reason
    resets = [e.get("reset_type") for e in w.actions(least, "Manager.Reset")]
    assert resets == ["GracefulRestart"]
