"""In-band agent state machine, seed-004 GSP mismatch, degrade knob, determinism."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from lockstep_common.events.v1 import HealthObserved, InventoryObserved
from lockstep_common.vocabulary import Component
from lockstep_sim.agents.reports import health_event, inventory_event
from lockstep_sim.agents.software import (
    BUSBW_DEGRADED_RATIO,
    CATALOG,
    BranchType,
    DkmsState,
    Faults,
    NodeSoftware,
)
from lockstep_sim.agents.state import ALLOWED, InvalidTransition, Phase, transition

pytestmark = pytest.mark.unit
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_table_covers_every_phase() -> None:
    assert set(ALLOWED) == set(Phase)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(Phase, Phase)))
def test_every_pair_is_allowed_or_raises(current: Phase, target: Phase) -> None:
    if target in ALLOWED[current]:
        assert transition(current, target) is target
    else:
        with pytest.raises(InvalidTransition, match=f"from {current.value} to {target.value}"):
            transition(current, target)


def test_clean_branch_upgrade_aligns_module_and_gsp() -> None:
    node = NodeSoftware("n1", driver_version="570.172.08")
    node.install_driver("580.65.06")
    assert node.phase is Phase.DKMS_BUILT
    # Before the reboot the old module is still loaded.
    assert node.state.loaded_module == "570.172.08"
    assert node.reboot() is Phase.READY
    s = node.state
    assert (s.loaded_module, s.gsp_firmware, s.firmware_dirs) == (
        "580.65.06",
        "580.65.06",
        ("580.65.06",),
    )
    assert s.gsp_aligned()
    assert s.driver.branch_type is BranchType.LTSB
    assert (s.cuda, s.nccl_cuda_major, s.fabric_manager) == ("13.0", 13, "580.65.06")


def test_gsp_mismatch_produces_seed_004_evidence() -> None:
    node = NodeSoftware("n1", driver_version="570.172.08", faults=Faults(missing_firmware_dir=True))
    node.install_driver("580.65.06")
    assert node.reboot() is Phase.GSP_MISMATCH
    inv = inventory_event("n1", "s1", node.state, 1, NOW)
    # Loaded module names a version with no /lib/firmware/nvidia/<version> directory.
    assert inv.loaded_module_version == "580.65.06"
    assert inv.firmware_dirs == ("570.172.08",)
    assert inv.loaded_module_version not in inv.firmware_dirs
    # GSP firmware stays on the old branch.
    assert inv.components[Component.GPU_GSP] == "570.172.08"
    assert inv.components[Component.DRIVER] == "580.65.06"
    health = node.sample_health()
    assert health.dcgm_passed is False
    assert health.xid_counts.get("79", 0) > 0
    assert health.nccl_busbw_gbps is None
    assert health.gsp_init_failed is True  # RmInitAdapter failed: the healthgate's GSP rule


def test_gsp_mismatch_recovers_by_reinstall() -> None:
    node = NodeSoftware("n1", driver_version="570.172.08", faults=Faults(missing_firmware_dir=True))
    node.install_driver("580.65.06")
    node.reboot()
    with pytest.raises(InvalidTransition):
        node.rebuild_dkms()
    node.faults.missing_firmware_dir = False
    node.install_driver("580.65.06")
    assert node.reboot() is Phase.READY
    assert node.state.gsp_aligned()
    assert node.sample_health().dcgm_passed is True


def test_dkms_fails_against_new_kernel_and_blocks_reboot() -> None:
    node = NodeSoftware("n1", faults=Faults(dkms_fails_on_new_kernel=True))
    node.install_driver("580.95.05", kernel="6.8.0-90-generic")
    assert node.phase is Phase.DKMS_FAILED
    assert node.state.dkms is DkmsState.FAILED
    inv = inventory_event("n1", "s1", node.state, 1, NOW)
    assert inv.members["dkms_nvidia"] == "failed for 6.8.0-90-generic"
    with pytest.raises(InvalidTransition, match="dkms_failed to rebooting"):
        node.reboot()
    node.faults.dkms_fails_on_new_kernel = False
    node.rebuild_dkms()
    assert node.reboot() is Phase.READY
    assert node.state.kernel == "6.8.0-90-generic"
    assert node.state.loaded_module == "580.95.05"


def test_dkms_on_same_kernel_succeeds_despite_knob() -> None:
    node = NodeSoftware("n1", faults=Faults(dkms_fails_on_new_kernel=True))
    node.install_driver("580.95.05")
    assert node.phase is Phase.DKMS_BUILT


def test_unknown_driver_version_is_rejected() -> None:
    with pytest.raises(KeyError):
        NodeSoftware("n1").install_driver("999.1")


def test_healthy_node_reports_pass_and_busbw_near_expected() -> None:
    node = NodeSoftware("n1", seed=7)
    for _ in range(50):
        h = node.sample_health()
        assert h.dcgm_passed is True
        assert h.xid_counts == {}
        assert h.nccl_busbw_gbps is not None
        assert h.nccl_busbw_gbps >= 0.95 * h.nccl_expected_gbps
        # Every signal the default gate policy judges is there.
        assert h.gpu_power_w is not None and 800 < h.gpu_power_w < 1050
        assert not h.gsp_init_failed and h.ecc_sbe_count == h.row_remap_pending == 0


def test_degrade_knob_raises_xids_and_drops_busbw_after_onset() -> None:
    node = NodeSoftware(
        "n1", faults=Faults(degrading_versions=frozenset({"580.95.05"}), degrade_onset_reports=2)
    )
    node.install_driver("580.95.05")
    node.reboot()
    samples = [node.sample_health() for _ in range(8)]
    assert all(s.dcgm_passed and not s.xid_counts for s in samples[:2])
    bad = samples[2:]
    assert all(not s.dcgm_passed for s in bad)
    xid79 = [s.xid_counts["79"] for s in bad]
    xid48 = [s.xid_counts["48"] for s in bad]
    assert xid48 == sorted(xid48) and xid48[-1] > xid48[0]
    assert xid79 == sorted(xid79) and xid79[-1] > 0
    for s in bad:
        assert s.nccl_busbw_gbps is not None
        assert s.nccl_busbw_gbps < BUSBW_DEGRADED_RATIO * s.nccl_expected_gbps


def test_degrade_knob_ignores_other_versions() -> None:
    node = NodeSoftware("n1", faults=Faults(degrading_versions=frozenset({"595.58.03"})))
    assert all(node.sample_health().dcgm_passed for _ in range(10))


def test_same_seed_same_reports_other_seed_differs() -> None:
    def run(seed: int) -> list[object]:
        node = NodeSoftware("n7", seed=seed)
        return [node.sample_health() for _ in range(20)]

    assert run(3) == run(3)
    assert run(3) != run(4)
    assert run(3) != [NodeSoftware("n8", seed=3).sample_health() for _ in range(20)]


def test_events_validate_against_the_catalogue() -> None:
    node = NodeSoftware("n1")
    inv = inventory_event("n1", "s1", node.state, 5, NOW)
    hl = health_event("n1", "s1", node.sample_health(), NOW)
    assert InventoryObserved.model_validate_json(inv.model_dump_json()) == inv
    assert HealthObserved.model_validate_json(hl.model_dump_json()) == hl
    assert inv.sequence == 5
    assert inv.members["driver_branch"] == "R580"


def test_catalog_respects_cuda_driver_floor() -> None:
    # standards.md section 7: CUDA 13 needs a >= 580 driver; 12.x needs >= 525.
    for release in CATALOG.values():
        floor = 580 if release.cuda_major == 13 else 525
        assert int(release.version.split(".")[0]) >= floor
