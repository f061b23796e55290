"""Sweeps of a healthy simulated fleet: every node, every member, every session closed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

import pytest

from lockstep_inventory.adapters.sweeper import SweepOptions, sweep
from lockstep_redfish.session import BmcTarget
from lockstep_sim.options import SimOptions
from lockstep_sim.simulator import Simulator

from .conftest import StaticCredentials, session_balance, sweep_all, targets, versions

pytestmark = pytest.mark.integration
NODES = 20


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(
        SimOptions(NODES, "gb200", seed=3, host_base="127.70.0.1", port=0)
    ) as simulator:
        yield simulator


@pytest.mark.parametrize("use_expand", [None, False])
async def test_sweep_reads_every_node_and_closes_sessions(
    sim: Simulator, use_expand: bool | None
) -> None:
    results = await sweep_all(sim, concurrency=8, use_expand=use_expand)

    for node in sim.fleet:
        result = results[node.id]
        assert result.readable, result.error
        assert result.error is None
        assert result.logout_error is None
        assert result.expanded is (use_expand is None)  # the simulator advertises $expand
        assert {m.Id: m.Version for m in result.members} == versions(sim, node.id)
        gpu = next(m for m in result.members if m.Id == "HGX_FW_GPU_0")
        assert gpu.Updateable is True
        assert gpu.Status is not None
        assert gpu.Status.Health == "OK"
        assert gpu.odata_id == "/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_0"
        assert session_balance(sim, node.id) == (1, 1, [])


async def test_results_stream_and_an_abandoned_sweep_deletes_its_sessions(
    sim: Simulator,
) -> None:
    seen = []
    async with aclosing(
        sweep(
            targets(sim),
            credentials=StaticCredentials(),
            options=SweepOptions(concurrency=4, use_expand=False),
        )
    ) as results:
        async for result in results:
            seen.append(result)
            if len(seen) == 2:
                break  # the consumer stops early: in-flight BMCs are cancelled
    assert all(r.readable for r in seen)
    for node in sim.fleet:
        created, deleted, still_open = session_balance(sim, node.id)
        assert created == deleted
        assert still_open == []
    assert sum(session_balance(sim, n.id)[0] for n in sim.fleet) < NODES


async def test_empty_target_list_yields_nothing() -> None:
    assert [r async for r in sweep([], credentials=StaticCredentials())] == []


def test_targets_never_carry_credentials_in_the_url() -> None:
    with pytest.raises(ValueError, match="must not carry credentials") as info:
        BmcTarget("node-1", "https://admin:hunter2@10.0.0.1")
    assert "hunter2" not in str(info.value)
    with pytest.raises(ValueError, match=r"http\(s\)"):
        BmcTarget("node-1", "ftp://10.0.0.1")
