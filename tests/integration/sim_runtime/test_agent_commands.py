"""A simulated node's in-band state as its agent's own executor reads and changes it (the
simulator's one command path: ``lockstep_sim.agents.commands``, served over NATS by
``FleetRuntime``; ``tests/integration/updater/test_in_band_nats.py`` drives it from the
updater)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lockstep_agent.commands import InbandCommand
from lockstep_sim.agents.commands import package_bytes, sim_executor
from lockstep_sim.options import SimOptions
from lockstep_sim.runtime import FleetRuntime

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime() -> Any:
    async with FleetRuntime(
        SimOptions(2, "gb200", port=0, host_base="127.61.0.1"), scheduler_port=0
    ) as rt:
        yield rt


def command(node: str, action: Any, n: int, version: str | None = None) -> InbandCommand:
    return InbandCommand(
        site="site-a",
        node_id=node,
        command_id=f"c-{n}",
        action=action,
        work_item="1",
        fencing_token=1,
        package="nvidia-driver" if version else None,
        version=version,
        package_sha256=hashlib.sha256(package_bytes(version)).hexdigest() if version else None,
    )


async def test_a_health_degrading_firmware_shows_in_the_agents_health(
    runtime: FleetRuntime,
) -> None:
    node = sorted(runtime.software)[0]
    healthy = runtime.software[node].sample_health()
    assert healthy.dcgm_passed and not healthy.xid_counts
    # What the simulator's degrade_health fault sets when the bad image activates.
    runtime.simulator.bmc(node).node.degraded_after_activation = True
    first, second = (runtime.software[node].sample_health() for _ in range(2))
    assert not first.dcgm_passed and first.xid_counts["48"] == 1
    assert second.xid_counts["48"] == 2, "XIDs keep rising while the image runs"
    assert second.nccl_busbw_gbps is not None
    assert second.nccl_busbw_gbps < 0.92 * second.nccl_expected_gbps


async def test_secure_boot_rejects_the_unsigned_module_at_the_next_boot(
    runtime: FleetRuntime, tmp_path: Path
) -> None:
    node = sorted(runtime.software)[1]
    software = runtime.software[node]
    software.faults = replace(software.faults, secure_boot_rejects_module=True)
    executor, host = sim_executor(software, tmp_path / "commands.sqlite")
    try:
        assert executor.execute(command(node, "install-driver", 1, "580.95.05")).status == "done"
        assert executor.execute(command(node, "reboot", 2)).status == "done"
        state = executor.execute(command(node, "read-state", 3)).state
    finally:
        executor.close()
    assert state is not None and state.phase == "module_rejected"
    assert state.module_rejected and state.loaded_module is None
    assert not state.diag_passed
    assert host.steps() == ["install-driver", "reboot"]
