"""Turn a simulated node's in-band state into ``InventoryObserved`` / ``HealthObserved`` events
(no I/O): the simulated probes' side of ``lockstep_agent``'s reading (``publisher.SimReading``).
The source every agent report carries is the agent's own (``lockstep_agent.reports``)."""

from __future__ import annotations

from datetime import datetime

from lockstep_agent.reports import agent_inventory, agent_source
from lockstep_common.events.v1 import HealthObserved, InventoryObserved
from lockstep_common.vocabulary import Component
from lockstep_sim.agents.software import HealthSample, SoftwareState

__all__ = ["agent_source", "components", "health_event", "inventory_event", "members"]


def components(state: SoftwareState) -> dict[Component, str]:
    """Lockstep component -> version as an in-band agent reads it."""
    out: dict[Component, str] = {
        Component.DRIVER: state.driver.version,
        Component.CUDA: state.cuda,
        Component.NCCL: state.nccl,
        Component.KERNEL: state.kernel,
    }
    if state.gsp_firmware is not None:
        out[Component.GPU_GSP] = state.gsp_firmware
    if state.fabric_manager is not None:
        out[Component.FABRIC_MANAGER] = state.fabric_manager
    return out


def members(state: SoftwareState) -> dict[str, str]:
    """Raw facts with no ``Component`` of their own (branch, DKMS, NCCL's CUDA build)."""
    out = {
        "driver_branch": state.driver.branch,
        "driver_branch_type": state.driver.branch_type.value,
        "dkms_nvidia": f"{state.dkms.value} for {state.pending_kernel or state.kernel}",
        "nccl_cuda_major": str(state.nccl_cuda_major),
    }
    if state.pending_kernel is not None:
        out["pending_kernel"] = state.pending_kernel
    return out


def inventory_event(
    node_id: str, site: str, state: SoftwareState, sequence: int, now: datetime
) -> InventoryObserved:
    """The inventory report of one node, in the agent's one shape of it."""
    return agent_inventory(
        node_id,
        site,
        sequence,
        now,
        components=components(state),
        members=members(state),
        firmware_dirs=state.firmware_dirs,
        loaded_module=state.loaded_module,
    )


def health_event(node_id: str, site: str, sample: HealthSample, now: datetime) -> HealthObserved:
    """The health report of one node."""
    return HealthObserved(
        node_id=node_id,
        site=site,
        observed_at=now,
        dcgm_level=sample.dcgm_level,
        dcgm_passed=sample.dcgm_passed,
        xid_counts=sample.xid_counts,
        nccl_busbw_gbps=sample.nccl_busbw_gbps,
        nccl_expected_gbps=sample.nccl_expected_gbps,
        sm_clock_mhz=sample.sm_clock_mhz,
        throttle_reasons=sample.throttle_reasons,
        max_temperature_c=sample.max_temperature_c,
        heartbeat=sample.heartbeat,
        gpu_power_w=sample.gpu_power_w,
        ecc_sbe_count=sample.ecc_sbe_count,
        row_remap_pending=sample.row_remap_pending,
        pcie_replay_count=sample.pcie_replay_count,
        nvlink_crc_error_count=sample.nvlink_crc_error_count,
        gsp_init_failed=sample.gsp_init_failed,
    )
