"""A Redfish session from ``lockstep_redfish`` alone against the simulator: log in, GET,
always log out (also when a request fails or the caller is cancelled), and the kind of each
failure (transient or permanent)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from lockstep_common.errors import Disposition, disposition_for
from lockstep_redfish import (
    BmcRefused,
    BmcTarget,
    BmcUnavailable,
    CredentialError,
    PlainHttpRefused,
    RedfishClient,
    RetryPolicy,
)
from lockstep_redfish.models import ServiceRoot, parse
from lockstep_sim.faults import Fault, FaultPlan
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.simulator import Simulator

pytestmark = pytest.mark.integration
NODE = "node-00000"
FIRMWARE = "/redfish/v1/UpdateService/FirmwareInventory"
FAST = RetryPolicy(timeout_s=1.0, retries=0, backoff_s=0.01)


class Credentials:
    def __init__(self, password: str = DEFAULT_PASSWORD) -> None:
        self.password = password
        self.read = 0

    def get(self, node_id: str) -> tuple[str, str]:
        self.read += 1
        if node_id != NODE:
            raise CredentialError(f"no BMC credentials for {node_id}")
        return DEFAULT_USERNAME, self.password


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimOptions(1, "gb200", host_base="127.72.0.1", port=0)) as simulator:
        yield simulator
        simulator.set_faults(None)  # release requests still hanging


def target(sim: Simulator) -> BmcTarget:
    return BmcTarget(NODE, sim.bmc_url(NODE), allow_plain_http=True)


def sessions(sim: Simulator) -> tuple[int, int, list[str]]:
    """(sessions created, sessions deleted, sessions still open) on the BMC."""
    ledger = sim.bmc(NODE).ledger
    created = sum(e["action"] == "session_create" and e["status"] == 201 for e in ledger)
    deleted = sum(e["action"] == "session_delete" and e["status"] == 200 for e in ledger)
    return created, deleted, sim.bmc(NODE).sessions.ids()


def _after_login(fault: Fault) -> FaultPlan:
    """A 0 ms 'fault' absorbs the session POST; ``fault`` then hits the next request."""
    return FaultPlan((Fault("latency", nodes=(NODE,), latency_ms=0, count=1), fault))


async def test_get_a_resource_in_a_session_then_it_is_deleted(sim: Simulator) -> None:
    client = RedfishClient(Credentials(), RetryPolicy())
    async with client.session(target(sim)) as bmc:
        assert sessions(sim) == (1, 0, ["1"])
        root = parse(ServiceRoot, (await bmc.get("/redfish/v1/")).body, bmc.url("/redfish/v1/"))
        inventory = await bmc.get(FIRMWARE)
        missing = await bmc.request("GET", FIRMWARE + "/Nope")  # any status is returned
    assert root.supports_expand_levels
    assert len(inventory.body["Members"]) == 30
    assert missing.status == 404
    assert bmc.logout_error is None
    assert sessions(sim) == (1, 1, [])


async def test_a_failed_request_still_deletes_the_session(sim: Simulator) -> None:
    # Two resets: aiohttp itself retries an idempotent request once on a reused connection.
    sim.set_faults(_after_login(Fault("connection_reset", nodes=(NODE,), count=2)))
    client = RedfishClient(Credentials(), FAST)
    with pytest.raises(BmcUnavailable, match=r"connection failed .* \(after 1 attempts\)") as info:
        async with client.session(target(sim)) as bmc:
            await bmc.get(FIRMWARE)
    assert disposition_for(info.value, delivery=1, max_deliver=3) is Disposition.RETRY
    assert sessions(sim) == (1, 1, [])


async def test_a_cancelled_request_still_deletes_the_session(sim: Simulator) -> None:
    sim.set_faults(_after_login(Fault("hang", nodes=(NODE,), count=1, max_seconds=30)))
    client = RedfishClient(Credentials(), RetryPolicy(timeout_s=30, retries=0))
    started = asyncio.Event()

    async def read() -> None:
        async with client.session(target(sim)) as bmc:
            started.set()
            await bmc.get(FIRMWARE)  # hangs

    task = asyncio.create_task(read())
    await started.wait()
    await asyncio.sleep(0.1)  # the GET is in flight
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sessions(sim) == (1, 1, [])


async def test_wrong_password_is_permanent_and_creates_no_session(sim: Simulator) -> None:
    client = RedfishClient(Credentials("not-the-password"), FAST)
    with pytest.raises(BmcRefused) as info:
        async with client.session(target(sim)):
            pass
    url = f"{sim.bmc_url(NODE)}/redfish/v1/SessionService/Sessions"
    assert str(info.value) == f"POST {url}: authentication failed (HTTP 401)"
    assert "not-the-password" not in str(info.value)
    assert disposition_for(info.value, delivery=1, max_deliver=3) is Disposition.DEAD_LETTER
    assert sessions(sim) == (0, 0, [])


async def test_missing_credentials_are_permanent_and_nothing_is_sent(sim: Simulator) -> None:
    client = RedfishClient(Credentials(), FAST)
    with pytest.raises(CredentialError, match="no BMC credentials for node-00001"):
        async with client.session(
            BmcTarget("node-00001", sim.bmc_url(NODE), allow_plain_http=True)
        ):
            pass
    assert sim.bmc(NODE).ledger == []


async def test_status_errors_inside_a_session(sim: Simulator) -> None:
    client = RedfishClient(Credentials(), FAST)
    async with client.session(target(sim)) as bmc:
        with pytest.raises(BmcRefused, match=r"GET .*/Nope: HTTP 404$"):
            await bmc.get(FIRMWARE + "/Nope")
        sim.bmc(NODE).sessions.delete("1")  # the BMC forgot the session (expired, rebooted)
        with pytest.raises(BmcUnavailable, match=r"GET .*: HTTP 401$"):
            await bmc.get(FIRMWARE)
    assert bmc.logout_error is not None and "HTTP 401" in bmc.logout_error


async def test_exhausted_retries_on_503_are_transient(sim: Simulator) -> None:
    sim.set_faults(_after_login(Fault("http_5xx", nodes=(NODE,), status=503, retry_after=0)))
    client = RedfishClient(Credentials(), RetryPolicy(timeout_s=1, retries=1, backoff_s=0.01))
    async with client.session(target(sim)) as bmc:
        with pytest.raises(BmcUnavailable, match=r"HTTP 503 \(after 2 attempts\)"):
            await bmc.get(FIRMWARE)
        sim.set_faults(None)
    assert sessions(sim) == (1, 1, [])


async def test_requests_need_an_open_session_and_a_path(sim: Simulator) -> None:
    session = RedfishClient(Credentials(), FAST).session(target(sim))
    with pytest.raises(RuntimeError, match="not open"):
        await session.get("/redfish/v1/")
    async with session as bmc:
        with pytest.raises(ValueError, match="must start with '/'"):
            await bmc.get("http://elsewhere/redfish/v1/")
        with pytest.raises(RuntimeError, match="already open"):
            await bmc.open()
    assert sessions(sim) == (1, 1, [])


async def test_an_http_bmc_is_sent_nothing_unless_its_target_allows_plain_http(
    sim: Simulator,
) -> None:
    credentials = Credentials()
    client = RedfishClient(credentials, FAST)
    with pytest.raises(PlainHttpRefused) as refused:
        async with client.session(BmcTarget(NODE, sim.bmc_url(NODE))):
            pass
    assert str(refused.value).startswith(
        f"refusing to send credentials over plain http to {sim.bmc_url(NODE)}"
    )
    assert disposition_for(refused.value, delivery=1, max_deliver=5) is Disposition.DEAD_LETTER
    assert (credentials.read, sim.bmc(NODE).ledger) == (0, [])  # not even read, nothing sent
    async with client.session(target(sim)) as bmc:  # allowed: a simulated BMC
        await bmc.get("/redfish/v1/")
    assert credentials.read == 1 and sessions(sim) == (1, 1, [])
