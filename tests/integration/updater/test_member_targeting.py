"""A package for one NIC model updates only the members of that model (issue 12 leftover): a
GB200 tray's ``CX7_0`` and ``NIC_0``/``NIC_1`` are all the NIC component, of two models, and
the simulator links each member to its PCIe device (``RelatedItem``; lockstep_sim.pcie). The
updater names as ``Targets`` only the members whose device the package's firmware device
record matches, so the other model is neither pushed to nor activated, and the node ends done."""

from __future__ import annotations

import pytest

from lockstep_common.events.v1 import DeviceVerified
from lockstep_common.vocabulary import Component
from lockstep_sim.profiles import GB200, ComponentClass
from lockstep_updater.domain.steps import NodeStep
from tests.integration.sim.pldm_fixtures import package_for
from tests.integration.updater.conftest import World, attest_image
from tests.integration.updater.test_executor_sim import plan_and_release

pytestmark = pytest.mark.integration
NIC_STACK = "c" * 64
FIRMWARE = "/redfish/v1/UpdateService/FirmwareInventory"
NICS = [c for c in GB200 if c.kind == "nic"]
CX7 = next(c for c in NICS if c.ids == ("CX7_0",))
CONNECTX = next(c for c in NICS if c.ids == ("NIC_0", "NIC_1"))


async def release_nic_update(w: World, model: ComponentClass, version: str) -> str:
    """Attest a bundle whose NIC image is for ``model`` and release a one-node wave of it."""
    nic = attest_image(w.bundle, "nic.fwpkg", package_for(model, version), Component.NIC, version)
    async with w.store.transaction() as tx:
        await tx.record_bundle(NIC_STACK, str(w.bundle), (nic,))
    node = w.rt.fleet[0].id
    await plan_and_release(w, (node,), stack=NIC_STACK, components=(Component.NIC,))
    return node


def nic_versions(w: World, node: str) -> dict[str, str]:
    comps = w.rt.simulator.bmc(node).node.components
    return {m: c.version for m, c in comps.items() if c.cls.kind == "nic"}


@pytest.mark.parametrize(
    ("model", "version", "other"),
    [(CX7, "28.43.1000", CONNECTX), (CONNECTX, "32.42.1000", CX7)],
    ids=["cx7", "connectx"],
)
async def test_a_package_for_one_nic_model_updates_only_its_members(
    world: World, model: ComponentClass, version: str, other: ComponentClass
) -> None:
    w = world
    node = await release_nic_update(w, model, version)
    before = nic_versions(w, node)
    await w.settle()
    item = w.store.item(node)
    assert item.state is NodeStep.DONE, item.reason
    after = nic_versions(w, node)
    assert {m: after[m] for m in model.ids} == dict.fromkeys(model.ids, version)
    assert {m: after[m] for m in other.ids} == {m: before[m] for m in other.ids}
    targets = sorted(f"{FIRMWARE}/{m}" for m in model.ids)
    (push,) = w.pushes(node)
    assert sorted(push["targets"]) == targets
    (activation,) = [
        e for e in w.rt.simulator.bmc(node).ledger
        if e["action"] == "UpdateService.Activate" and e.get("status") == 202
    ]  # fmt: skip
    assert sorted(activation["targets"]) == sorted(model.ids)
    (verified,) = [e for e in w.store.events.events if isinstance(e, DeviceVerified)]
    assert (verified.component, verified.to_version) == (Component.NIC, version)
