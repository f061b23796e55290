"""Node facts become the inventory and health events the services already consume."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lockstep_agent.probes.dkms import DkmsEntry, DkmsFacts
from lockstep_agent.probes.files import DriverLine, FileFacts
from lockstep_agent.probes.node import NodeFacts
from lockstep_agent.probes.nvml import GpuFacts, NvmlFacts
from lockstep_agent.probes.xid import XidEvent, XidScan
from lockstep_agent.reports import Counters, agent_source, health_event, inventory_event
from lockstep_common.vocabulary import Component

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _facts(ecc: int = 0, temps: tuple[int, int] = (61, 74)) -> NodeFacts:
    return NodeFacts(
        files=FileFacts(
            loaded_module="580.65.06",
            driver=DriverLine(version="580.65.06", open_module=True, build="x"),
            firmware_dirs=("570.133.20", "580.65.06"),
            cuda="12.9.1",
            nccl="2.27.3",
            nic_firmware={"mlx5_0": "28.41.1000"},
            kernel="6.8.0-45-generic",
        ),
        dkms=DkmsFacts(
            entries=(
                DkmsEntry(
                    module="nvidia",
                    version="580.65.06",
                    kernel="6.8.0-45-generic",
                    arch="x86_64",
                    status="installed",
                ),
            )
        ),
        nvml=NvmlFacts(
            driver_version="580.65.06",
            cuda_driver_version="13.0",
            gpus=tuple(
                GpuFacts(
                    index=i,
                    vbios="96.00.A5.00.01",
                    gsp_firmware="580.65.06",
                    sm_clock_mhz=1980 - 10 * i,
                    temperature_c=temps[i],
                    power_w=650.0,
                    ecc_corrected_volatile=ecc,
                    pcie_replays=0,
                    throttle_reasons=("sw_power_cap",) if i else (),
                )
                for i in range(2)
            ),
        ),
        xids=XidScan(events=(XidEvent(code=79, pci="0000:9b:00", detail=""),)),
    )


def test_inventory_names_every_component_the_probes_found() -> None:
    event = inventory_event("n1", "s1", _facts(), 7, NOW)
    assert event.components == {
        Component.DRIVER: "580.65.06",
        Component.CUDA: "12.9.1",
        Component.NCCL: "2.27.3",
        Component.KERNEL: "6.8.0-45-generic",
        Component.GPU_GSP: "580.65.06",
        Component.GPU_VBIOS: "96.00.A5.00.01",
        Component.NIC: "28.41.1000",
    }
    assert event.members["dkms_nvidia_580.65.06"] == "installed for 6.8.0-45-generic"
    assert event.members["gpu1_gsp"] == "580.65.06"
    assert event.firmware_dirs == ("570.133.20", "580.65.06")
    assert event.loaded_module_version == "580.65.06"
    assert event.sequence == 7
    assert agent_source("n1") == "/lockstep/agent-n1"


def test_nvml_down_is_in_the_inventory_and_the_driver_comes_from_proc() -> None:
    facts = _facts().model_copy(update={"nvml": NvmlFacts(error="NVML did not initialise: x")})
    event = inventory_event("n1", "s1", facts, 1, NOW)
    assert event.components[Component.DRIVER] == "580.65.06"
    assert event.members["nvml_error"] == "NVML did not initialise: x"
    assert Component.GPU_GSP not in event.components


def test_health_summarises_gpus_and_reports_counter_deltas() -> None:
    counters = Counters()
    first = health_event("n1", "s1", _facts(ecc=10), 1, counters, NOW)
    assert first.xid_counts == {"79": 1}
    assert first.sm_clock_mhz == 1975.0
    assert first.max_temperature_c == 74.0
    assert first.throttle_reasons == ("sw_power_cap",)
    assert first.ecc_sbe_count is None  # no previous total: unknown, not 10
    second = health_event("n1", "s1", _facts(ecc=13), 2, counters, NOW)
    assert second.ecc_sbe_count == 6  # +3 on each of the two GPUs
    reloaded = health_event("n1", "s1", _facts(ecc=1), 3, counters, NOW)
    assert reloaded.ecc_sbe_count == 2  # the driver reloaded: totals restarted, never negative
