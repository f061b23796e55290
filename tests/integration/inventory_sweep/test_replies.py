"""Malformed replies, wrong credentials and TLS overrides end as unreadable results with a
reason; no secret appears in any result or log line."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from lockstep_inventory.adapters.sweeper import SweepOptions, sweep
from lockstep_redfish.session import BmcTarget
from lockstep_sim.options import DEFAULT_PASSWORD, SimOptions
from lockstep_sim.simulator import Simulator

from .conftest import StaticCredentials, session_balance, sweep_all

pytestmark = pytest.mark.integration
BAD = "node-00001"
MEMBER = "HGX_FW_GPU_0"
FW = "/redfish/v1/UpdateService/FirmwareInventory"


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimOptions(3, "gb200", host_base="127.70.2.1", port=0)) as simulator:
        yield simulator


@pytest.mark.parametrize("use_expand", [None, False])
async def test_malformed_member_is_reported_with_url_and_field(
    sim: Simulator, use_expand: bool | None
) -> None:
    component = sim.bmc(BAD).node.components[MEMBER]
    component.version = 42  # type: ignore[assignment]  # a BMC answering a number
    index = list(sim.bmc(BAD).node.components).index(MEMBER)

    results = await sweep_all(sim, use_expand=use_expand)

    bad = results[BAD]
    assert not bad.readable
    base = sim.bmc_url(BAD)
    if use_expand is None:
        where = f"{base}{FW}?$expand=.($levels=1): Members[{index}].Version"
    else:
        where = f"{base}{FW}/{MEMBER}: Version"
    assert bad.error == f"malformed reply from {where}: Input should be a valid string"
    assert session_balance(sim, BAD) == (1, 1, [])  # logged out despite the error
    assert all(results[n.id].readable for n in sim.fleet if n.id != BAD)


async def test_wrong_credentials_fail_authentication_without_leaking_secrets(
    sim: Simulator, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "not-the-Secret-7f3a"
    caplog.set_level(logging.DEBUG)

    results = await sweep_all(sim, credentials=StaticCredentials({BAD: wrong}))

    bad = results[BAD]
    assert not bad.readable
    login = f"POST {sim.bmc_url(BAD)}/redfish/v1/SessionService/Sessions"
    assert bad.error == f"{login}: authentication failed (HTTP 401)"
    assert session_balance(sim, BAD) == (0, 0, [])
    assert "authentication failed" in caplog.text
    for secret in (wrong, DEFAULT_PASSWORD):
        assert secret not in caplog.text
        # The profile a result names is a shipped profile's id, and the simulator's default
        # password happens to spell the simulator's own: that field is checked apart.
        assert all(secret not in repr(replace(r, profile=None)) for r in results.values())
    assert {r.profile for r in results.values() if r.readable} == {"lockstep-sim"}
    tokens = [s.token for b in sim.bmcs.values() for s in b.sessions.by_token.values()]
    assert tokens == []


async def test_tls_override_is_logged_per_bmc(
    sim: Simulator, caplog: pytest.LogCaptureFixture
) -> None:
    """The simulator speaks plain HTTP, so both https targets fail; only the one whose own
    setting turns verification off is logged as such (no global suppression)."""
    caplog.set_level(logging.WARNING)
    https = [
        BmcTarget("node-00000", sim.bmc_url("node-00000").replace("http:", "https:")),
        BmcTarget("node-00001", sim.bmc_url("node-00001").replace("http:", "https:"), False),
    ]
    options = SweepOptions(retries=0, timeout_s=2)
    results = [r async for r in sweep(https, credentials=StaticCredentials(), options=options)]

    assert [r.readable for r in results] == [False, False]
    assert all("connection failed" in (r.error or "") for r in results)
    off = [r.getMessage() for r in caplog.records if "TLS verification is off" in r.getMessage()]
    assert off == [f"TLS verification is off for node-00001 ({https[1].url})"]
