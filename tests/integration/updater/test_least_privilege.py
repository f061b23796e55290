"""Least privilege on the simulator (reliability.md 7 H5): the updater flashes with the BMC's
Operator-class account and refuses an Administrator-class one at preflight, before any write;
the role is read from the session (Session v1_7_0 ``Roles``) or, on a BMC whose sessions name
none, from the account in AccountService."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep_sim import sessions
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.testing.sim_fleet import sim_executor
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION
from tests.integration.updater.conftest import ENV, FAST, World
from tests.integration.updater.test_executor_sim import nodes_of, plan_and_release

pytestmark = pytest.mark.integration
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
