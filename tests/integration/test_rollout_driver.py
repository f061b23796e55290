"""A bundle with a driver/CUDA/NCCL step, end to end on real NATS + PostgreSQL and the simulator
(issue 13 item 1): the attest service accepts the driver package and what ships inside it as
one in-band unit; the planner pins all of it and hands the updater the installable parts
(``wave.planned``: no GSP firmware of its own); the updater flashes the firmware, then installs
the package through the authenticated node agents, once per node; the agents report the new
driver branch to the inventory, and every node conforms to the new pin."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lockstep_attest.testing.bundles import DriverPackage
from lockstep_cli.polling import until
from lockstep_common.vocabulary import Component, ObservationSource
from lockstep_inventory import queries
from lockstep_inventory.adapters import state
from tests.integration.rollout_stack import NODES, Stack, running_stack
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION

pytestmark = pytest.mark.integration
# R580 LTSB -> R595 production: a branch change, with the CUDA 13.2 user space it brings.
DRIVER = DriverPackage("595.58.03", cuda="13.2", nccl="2.27.7", package=b"nvidia-open 595.58.03")


@pytest.fixture
async def stack(
    servers: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    async with running_stack(servers, namespace, tmp_path, monkeypatch, driver=DRIVER) as running:
        yield running


def ran_on(stack: Stack, node: str) -> list[tuple[str, ...]]:
    """The programs the node's agent ran (its command executor, on the simulated host)."""
    return [argv[:2] for argv in stack.rt.command_hosts[node].ran]


async def test_a_driver_package_rolls_out_through_the_agents_after_the_firmware(
    stack: Stack,
) -> None:
    fleet = [n.id for n in stack.rt.fleet]
    assert {stack.rt.software[n].state.driver.branch for n in fleet} == {"R580"}
    bundle = await stack.start_rollout()
    in_band = [c for c in bundle["components"] if c["activation"] == "in_band"]
    assert sorted(c["component"] for c in in_band) == [
        "cuda",
        "driver",
        "fabric_manager",
        "gpu_gsp",
        "nccl",
    ]
    checks = [c["reason"] for c in bundle["checks"] if c["check"] == "in_band"]
    assert "gb200/driver: 595.58.03 from images/driver.run, installed in band as one unit" in checks

    (canary,) = await stack.wait("planner", "wave.planned.")
    assert sorted(canary["components"]) == ["cuda", "driver", "fabric_manager", "gpu_vbios", "nccl"]
    (done,) = await stack.wait("planner", "rollout.completed.")
    assert done["nodes_updated"] == NODES and done["nodes_failed"] == 0, done

    for node in fleet:  # one package per node, once, after its firmware; the node given back
        assert ran_on(stack, node) == [
            ("apt-get", "download"),  # checked against the attested digest, then installed
            ("apt-get", "install"),
            ("systemctl", "reboot"),
        ], node
        software = stack.rt.software[node].state
        assert (software.driver.branch, software.loaded_module, software.gsp_firmware) == (
            "R595",
            DRIVER.version,
            DRIVER.version,
        )
        assert len(stack.pushes(node)) == 1, node
        assert stack.rt.scheduler.node(node).drain is None
    verified = await stack.emitted("updater", "device.verified.")
    assert {(v["component"], v["to_version"]) for v in verified} == {
        ("gpu_vbios", NEW_GPU_VERSION),
        ("driver", DRIVER.version),
        ("fabric_manager", DRIVER.version),
        ("cuda", DRIVER.cuda),
        ("nccl", DRIVER.nccl),
    }

    (pin,) = await stack.wait("planner", "pin.changed.")
    assert pin["stack"]["gb200"][str(Component.GPU_GSP)] == DRIVER.version
    inventory = stack.apps["inventory"].require().pool

    async def reported() -> bool:  # the agents' next reports carry the new branch
        async with inventory.acquire() as conn:
            seen = await state.observations(conn, fleet)
        agent = [seen.get(n, {}).get(ObservationSource.AGENT) for n in fleet]
        return all(
            o is not None
            and o.components.get(Component.DRIVER) == DRIVER.version
            and o.members.get("driver_branch") == "R595"
            for o in agent
        )

    await until(reported, what="the agents reporting driver 595.58.03 (R595)")

    async def pinned() -> bool:
        async with inventory.acquire() as conn:
            return any(p.stack_hash == pin["stack_hash"] for p in await state.pins(conn))

    await until(pinned, what="the inventory applied the rollout's pin")
    await stack.sweep()
    async with inventory.acquire() as conn:
        status = await queries.fleet_status(conn)
    assert (status.total.nodes, status.total.conforming) == (NODES, NODES), status.as_json()
