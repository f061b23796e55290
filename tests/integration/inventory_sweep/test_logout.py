"""Logouts run outside the BMC's ``concurrency`` slot, yet every session is deleted: a result
is yielded only after its logout, and the sweep does not finish before its logouts have."""

from __future__ import annotations

from contextlib import aclosing

import pytest

from lockstep_inventory.adapters.sweeper import SweepOptions, sweep
from lockstep_sim.faults import Fault, FaultPlan
from lockstep_sim.options import SimOptions
from lockstep_sim.simulator import Simulator

from .conftest import StaticCredentials, session_balance, targets

pytestmark = pytest.mark.integration
SLOW, OTHER = "node-00000", "node-00001"


def _delete_faults(fault: Fault) -> FaultPlan:
    """Five 0 ms 'faults' absorb SLOW's POST and four GETs (the root, the inventory, and the
    UpdateService and Managers its profile is chosen from); ``fault`` then hits its DELETE."""
    return FaultPlan((Fault("latency", nodes=(SLOW,), latency_ms=0, count=5), fault))


async def test_next_bmc_is_read_while_a_logout_is_in_flight() -> None:
    plan = _delete_faults(Fault("hang", nodes=(SLOW,), max_seconds=30))
    async with Simulator(
        SimOptions(2, "gb200", host_base="127.70.3.1", port=0, faults=plan)
    ) as sim:
        async with aclosing(
            sweep(
                targets(sim),
                credentials=StaticCredentials(),
                options=SweepOptions(concurrency=1, timeout_s=20),
            )
        ) as results:
            first = await anext(results)
            # With one BMC slot, OTHER could only be read because SLOW's DELETE (still
            # hanging: its session is open) no longer held the slot.
            assert first.node_id == OTHER
            assert first.readable, first.error
            assert session_balance(sim, SLOW) == (1, 0, ["1"])
            sim.set_faults(None)  # the BMC answers the hanging DELETE now
            second = await anext(results)
        assert second.node_id == SLOW
        assert second.readable, second.error
        assert second.logout_error is None  # yielded only once its session was deleted
        for node in sim.fleet:
            assert session_balance(sim, node.id) == (1, 1, [])


async def test_an_abandoned_sweep_waits_for_logouts_in_flight() -> None:
    plan = _delete_faults(Fault("latency", nodes=(SLOW,), latency_ms=300))
    async with Simulator(
        SimOptions(2, "gb200", host_base="127.70.4.1", port=0, faults=plan)
    ) as sim:
        async with aclosing(
            sweep(
                targets(sim), credentials=StaticCredentials(), options=SweepOptions(concurrency=1)
            )
        ) as results:
            first = await anext(results)
            assert first.node_id == OTHER
            assert session_balance(sim, SLOW) == (1, 0, ["1"])  # its DELETE is in flight
        # Closing the sweep returned only after SLOW's slow DELETE was answered.
        for node in sim.fleet:
            assert session_balance(sim, node.id) == (1, 1, [])
