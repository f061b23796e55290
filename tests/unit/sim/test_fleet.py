"""The pure fleet model: profiles, placement, seeding, inventory shape and PLDM planning."""

from __future__ import annotations

import pytest

from lockstep_sim.errors import RedfishError
from lockstep_sim.fleet import NODES_PER_RACK, build_fleet
from lockstep_sim.profiles import GB200, HGX_H100
from lockstep_sim.update_service import UpdateOptions, parse_options, plan_update
from tests.integration.sim.pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for

pytestmark = pytest.mark.unit


def test_gb200_inventory_follows_the_capture() -> None:
    (node,) = build_fleet(1, "gb200")
    assert len(node.components) == 30
    for name in (
        "HGX_FW_GPU_0",
        "HGX_FW_GPU_3",
        "HGX_InfoROM_GPU_2",
        "HGX_FW_ERoT_CPU_1",
        "FW_BMC_0",
        "CX7_0",
        "UEFI",
    ):
        assert name in node.components
    assert node.components["HGX_FW_GPU_0"].version == "97.00.6C.00.03"
    assert node.components["FW_BMC_0"].version == "GB200Nvl-24.12-8"
    assert node.components["HGX_FW_GPU_0"].cls.software_id == "0xC000"


def test_hgx_h100_inventory_follows_the_capture() -> None:
    (node,) = build_fleet(1, "hgx-h100")
    assert {f"HGX_FW_GPU_SXM_{i}" for i in range(1, 9)} <= set(node.components)
    assert {f"HGX_FW_NVSwitch_{i}" for i in range(4)} <= set(node.components)
    assert node.components["HGX_FW_NVSwitch_0"].version == "96.10.4A.00.01"


def test_one_way_parts_have_no_banks() -> None:
    (node,) = build_fleet(1, "hgx-h100")
    assert node.components["PSU_0"].inactive_version is None
    assert not node.components["PSU_0"].banks
    assert node.components["HGX_FW_GPU_SXM_1"].inactive_version is not None


def test_seed_makes_the_fleet_reproducible() -> None:
    first = [n.summary(8000) for n in build_fleet(50, "mixed", seed=3)]
    again = [n.summary(8000) for n in build_fleet(50, "mixed", seed=3)]
    other = [n.summary(8000) for n in build_fleet(50, "mixed", seed=4)]
    assert first == again
    assert first != other
    assert {n["profile"] for n in first} == {"gb200", "hgx-h100"}


def test_placement_and_addresses() -> None:
    fleet = build_fleet(300, "gb200", host_base="127.1.0.250")
    addresses = [n.address for n in fleet]
    assert len(set(addresses)) == 300
    assert not any(a.endswith((".0", ".255")) for a in addresses)
    assert fleet[0].rack == fleet[NODES_PER_RACK - 1].rack != fleet[NODES_PER_RACK].rack
    entry = fleet[0].summary(8000)
    assert set(entry) == {
        "id",
        "bmc_url",
        "profile",
        "supplier",
        "site",
        "rack",
        "fabric_domain",
        "pool",
        "allow_plain_http",
    }
    assert entry["bmc_url"] == "http://127.1.0.250:8000"
    assert entry["allow_plain_http"] is True  # it serves plain http: its entries say so


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown profile"):
        build_fleet(1, "dgx")
    with pytest.raises(ValueError, match=r"127\.0\.0\.0/8"):
        build_fleet(1, "gb200", host_base="10.0.0.1")


def test_profiles_give_every_updatable_class_descriptors() -> None:
    for cls in (*GB200, *HGX_H100):
        assert cls.descriptors()[0] == (0x0000, cls.pci_vendor)
        assert cls.pci_device != 0


def test_plan_update_matches_descriptors_and_component_id() -> None:
    (node,) = build_fleet(1, "gb200")
    plan = plan_update(node, package_for(GB200_GPU, NEW_GPU_VERSION), UpdateOptions())
    assert plan == {f"HGX_FW_GPU_{i}": NEW_GPU_VERSION for i in range(4)}
    same = package_for(GB200_GPU, "97.00.6C.00.03")
    assert plan_update(node, same, UpdateOptions()) == {}
    assert len(plan_update(node, same, UpdateOptions(force=True))) == 4


def test_plan_update_refuses_foreign_and_malformed_packages() -> None:
    (node,) = build_fleet(1, "gb200")
    with pytest.raises(RedfishError) as foreign:
        plan_update(node, package_for(GB200_GPU, "1", pci_device=0x4321), UpdateOptions())
    assert (foreign.value.status, foreign.value.name) == (400, "UpdateNotApplicable")
    with pytest.raises(RedfishError) as malformed:
        plan_update(node, b"\x00" * 64, UpdateOptions())
    assert malformed.value.name == "VerificationFailed"


def test_parse_options() -> None:
    options = parse_options(
        {"Targets": ["/x"], "Stage": True, "@Redfish.OperationApplyTime": "OnReset"}
    )
    assert options == UpdateOptions(("/x",), False, True, "OnReset")
    with pytest.raises(RedfishError):
        parse_options({"@Redfish.OperationApplyTime": "AtMaintenanceWindowStart"})
