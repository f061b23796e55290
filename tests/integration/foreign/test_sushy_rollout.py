"""The updater's rollout against sushy-tools (Redfish services nobody here wrote; issue 29 item
5): a node whose BMC is ``sushy-emulator`` (HTTP Basic over verified TLS, no SessionService, an
UpdateService with SimpleUpdate and no FirmwareInventory) is refused in preflight with one line
saying what it cannot do; one whose BMC is ``sushy-static`` serving the real GB200 capture
(which links a SessionService but answers its POST 204 without a token) fails at the login. In
both nothing is pushed, nothing drained, and the node is never reported updated."""

from __future__ import annotations

import pytest

from lockstep_common.events.v1 import DeviceVerified
from lockstep_redfish import RedfishClient
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.ports import OWNER
from lockstep_updater.steps.bmc_sessions import NodeSessions
from lockstep_updater.testing.sim_fleet import sim_executor
from tests.integration.foreign.test_sushy import (
    HOST,
    PASSWORD,
    USER,
    Foreign,
    emulator,
    static_gb200,
)
from tests.integration.updater.conftest import FAST, World, world
from tests.integration.updater.test_executor_sim import plan_and_release

pytestmark = pytest.mark.integration
__all__ = ["emulator", "static_gb200", "world"]  # the fixtures
NODE = "node-00000"


async def roll_onto(w: World, foreign: Foreign) -> None:
    """Run the node's update with its BMC at ``foreign`` until it ends."""
    w.facts.nodes[NODE] = w.facts.nodes[NODE].model_copy(
        update={"bmc_url": foreign.url, "allow_plain_http": False}
    )
    env = {"SIMBMC_USERNAME": USER, "SIMBMC_PASSWORD": PASSWORD}
    ex = sim_executor(w.rt, w.store, w.facts, w.bundle, FAST, env)
    w.executors.append(ex)
    # Verified TLS against the server's own certificate (the updater's default is the
    # system's trust store, which does not hold this test's CA).
    ex.ctx.client = RedfishClient(ex.ctx.credentials, FAST.transport, verify_tls=foreign.trust())
    ex.ctx.sessions = NodeSessions(ex.ctx.client)
    await plan_and_release(w, (NODE,))
    await w.settle(ex)


async def refusal_on(w: World, foreign: Foreign) -> str:
    """Why the node's update failed with its BMC at ``foreign`` (it must have failed)."""
    await roll_onto(w, foreign)
    item = w.store.item(NODE)
    assert item.state is NodeStep.FAILED, item.state
    return item.reason


def assert_untouched(w: World) -> None:
    assert [e for e in w.rt.scheduler.ledger if e.node_id == NODE and e.by == OWNER] == []
    assert not [e for e in w.store.events.events if isinstance(e, DeviceVerified)]


async def test_a_rollout_onto_sushy_emulator_is_refused_in_preflight_and_never_updated(
    world: World, emulator: Foreign
) -> None:
    w = world
    reason = await refusal_on(w, emulator)
    head = f"refused: BMC {NODE} (profile dmtf-generic): "
    assert reason == (
        f"{head}the account's privileges cannot be read; the profile's calls need "
        "ConfigureComponents, Login; no FirmwareInventory member holds gpu_vbios; nothing written"
    )
    assert HOST in emulator.url
    assert_untouched(w)


async def test_a_rollout_onto_the_static_gb200_capture_fails_at_its_login_and_is_never_updated(
    world: World, static_gb200: Foreign
) -> None:
    w = world
    reason = await refusal_on(w, static_gb200)
    assert "no session created (HTTP 204): the answer has no X-Auth-Token" in reason
    assert_untouched(w)
