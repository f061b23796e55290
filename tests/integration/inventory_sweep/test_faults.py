"""BMC faults (reliability.md 7.D1): hangs, 5xx with Retry-After and connection resets, before
and after login, neither stall the sweep nor get skipped; they are retried and end unreadable
with a reason when they keep failing. A ``latency`` fault of 0 ms with ``count=2`` in front
lets a later fault start only after the session exists (mid-sweep)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from lockstep_sim.faults import Fault, FaultPlan
from lockstep_sim.options import SimOptions
from lockstep_sim.simulator import Simulator

from .conftest import faults_fired, session_balance, sweep_all, versions

pytestmark = pytest.mark.integration
HANG, FAIL_5XX, RECOVER_5XX, RESET, RECOVER_RESET, MID_RESET, MID_HANG = (
    f"node-{i:05d}" for i in range(1, 8)
)
TIMEOUT_S = 0.5


def _after_login(node: str) -> Fault:
    """Two 0 ms 'faults' absorb the session POST and the ServiceRoot GET."""
    return Fault("latency", nodes=(node,), latency_ms=0, count=2)


PLAN = FaultPlan(
    (
        Fault("hang", nodes=(HANG,), max_seconds=30),
        Fault("http_5xx", nodes=(FAIL_5XX,), status=503, retry_after=0),
        Fault("http_5xx", nodes=(RECOVER_5XX,), status=503, retry_after=1, count=2),
        Fault("connection_reset", nodes=(RESET,)),
        Fault("connection_reset", nodes=(RECOVER_RESET,), count=2),
        _after_login(MID_RESET),
        Fault("connection_reset", nodes=(MID_RESET,)),
        _after_login(MID_HANG),
        Fault("hang", nodes=(MID_HANG,), max_seconds=30),
    )
)


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(
        SimOptions(20, "gb200", host_base="127.70.1.1", port=0, faults=PLAN)
    ) as simulator:
        yield simulator
        simulator.set_faults(None)  # release requests still hanging


@pytest.mark.parametrize("use_expand", [None, False])
async def test_faulty_bmcs_are_retried_bounded_and_reported(
    sim: Simulator, use_expand: bool | None
) -> None:
    started = time.monotonic()
    results = await sweep_all(
        sim, timeout_s=TIMEOUT_S, retries=2, backoff_s=0.05, use_expand=use_expand
    )
    elapsed = time.monotonic() - started

    # Bound: the worst node is the mid-sweep hang: 3 inventory attempts plus 2 logout
    # attempts of TIMEOUT_S each, plus backoffs; RECOVER_5XX waits 2 x Retry-After 1 s.
    assert elapsed < 10 * TIMEOUT_S
    assert elapsed >= 2.0  # Retry-After was honoured (the backoff alone is 0.05-0.1 s)

    broken = {HANG, FAIL_5XX, RESET, MID_RESET, MID_HANG}
    for node in sim.fleet:
        result = results[node.id]
        if node.id in broken:
            assert not result.readable
            assert result.members == ()
            assert result.error is not None
            assert sim.bmc_url(node.id) in result.error
            assert "after 3 attempts" in result.error
        else:
            assert result.readable, result.error
            assert {m.Id: m.Version for m in result.members} == versions(sim, node.id)
            assert session_balance(sim, node.id) == (1, 1, [])

    login = "POST " + sim.bmc_url(HANG) + "/redfish/v1/SessionService/Sessions"
    assert results[HANG].error == f"{login}: no answer within 0.5s (after 3 attempts)"
    assert "HTTP 503" in (results[FAIL_5XX].error or "")
    assert "connection failed" in (results[RESET].error or "")
    inventory = "GET " + sim.bmc_url(MID_RESET) + "/redfish/v1/UpdateService/FirmwareInventory"
    assert (results[MID_RESET].error or "").startswith(inventory)
    assert "connection failed" in (results[MID_RESET].error or "")
    assert "no answer within" in (results[MID_HANG].error or "")

    # Retried: every attempt reached the BMC (the ledger records each injected fault).
    assert len(faults_fired(sim, FAIL_5XX)) == 3
    assert len(faults_fired(sim, RESET)) == 3
    assert len(faults_fired(sim, RECOVER_5XX)) == 2
    assert len(faults_fired(sim, RECOVER_RESET)) == 2
    # Before login nothing was opened; after login the BMC died, so the logout failed too
    # and says so (the session is left to the BMC's SessionTimeout).
    for node_id in (HANG, FAIL_5XX, RESET):
        assert session_balance(sim, node_id) == (0, 0, [])
        assert results[node_id].logout_error is None
    for node_id in (MID_RESET, MID_HANG):
        assert "DELETE" in (results[node_id].logout_error or "")
