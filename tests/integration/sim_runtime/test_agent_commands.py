"""The agents' in-band command channel over HTTP, as an updater's node-agent adapter uses it."""

from __future__ import annotations

import base64
from typing import Any

import aiohttp
import pytest

from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.runtime import FleetRuntime

pytestmark = pytest.mark.integration


@pytest.fixture
async def runtime() -> Any:
    async with FleetRuntime(
        SimOptions(2, "gb200", port=0, host_base="127.61.0.1"), scheduler_port=0
    ) as rt:
        yield rt


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


ACCOUNT = basic(DEFAULT_USERNAME, DEFAULT_PASSWORD)


async def call(
    rt: FleetRuntime,
    method: str,
    path: str,
    body: Any = None,
    auth: dict[str, str] | None = ACCOUNT,
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(headers=auth) as http,
        http.request(method, f"{rt.scheduler_url}{path}", json=body) as resp,
    ):
        return resp.status, await resp.json()


async def test_driver_upgrade_steps_follow_the_transition_table(runtime: FleetRuntime) -> None:
    node = sorted(runtime.software)[0]
    status, state = await call(runtime, "GET", f"/agents/{node}")
    assert status == 200 and state["phase"] == "ready" and state["gsp_aligned"]
    status, err = await call(runtime, "POST", f"/agents/{node}/rebuild-dkms")
    assert status == 409 and "rebuild-dkms refused in phase ready" in err["error"]
    target = runtime.software[node].state.driver.version
    status, err = await call(runtime, "POST", f"/agents/{node}/install-driver", {"version": "1.0"})
    assert status == 400 and "unknown driver release '1.0'" in err["error"]
    from lockstep_sim.agents.software import CATALOG

    newer = next(v for v in sorted(CATALOG) if v != target)
    status, state = await call(
        runtime, "POST", f"/agents/{node}/install-driver", {"version": newer}
    )
    assert status == 200 and state["phase"] == "dkms_built"
    status, state = await call(runtime, "POST", f"/agents/{node}/reboot")
    assert status == 200 and state["phase"] == "ready"
    assert state["loaded_module"] == newer == state["gsp_firmware"]
    _, ledger = await call(runtime, "GET", "/agents/ledger")
    assert [e["step"] for e in ledger] == [
        "rebuild-dkms",
        "install-driver",
        "install-driver",
        "reboot",
    ]
    assert [e["outcome"] for e in ledger] == ["refused", "refused", "dkms_built", "ready"]


async def test_missing_firmware_dir_fault_reproduces_the_gsp_mismatch(
    runtime: FleetRuntime,
) -> None:
    from lockstep_sim.agents.software import CATALOG

    node = sorted(runtime.software)[1]
    status, _ = await call(runtime, "PUT", f"/agents/{node}/faults", {"missing_firmware_dir": True})
    assert status == 200
    current = runtime.software[node].state.driver.version
    newer = next(v for v in sorted(CATALOG) if v != current)
    await call(runtime, "POST", f"/agents/{node}/install-driver", {"version": newer})
    status, state = await call(runtime, "POST", f"/agents/{node}/reboot")
    assert status == 200 and state["phase"] == "gsp_mismatch"
    assert state["loaded_module"] == newer and newer not in state["firmware_dirs"]
    assert not state["gsp_aligned"]


async def test_bad_fault_knobs_are_refused_and_change_nothing(runtime: FleetRuntime) -> None:
    node = sorted(runtime.software)[0]
    status, err = await call(runtime, "PUT", f"/agents/{node}/faults", {"explode": True})
    assert status == 400 and "unknown fault knob(s) ['explode']" in err["error"]
    status, err = await call(
        runtime, "PUT", f"/agents/{node}/faults", {"missing_firmware_dir": "yes"}
    )
    assert status == 400 and "missing_firmware_dir must be true or false" in err["error"]
    status, state = await call(runtime, "GET", f"/agents/{node}")
    assert state["faults"]["missing_firmware_dir"] is False
    status, err = await call(runtime, "GET", "/agents/no-such-node")
    assert status == 404


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


async def test_the_channel_refuses_callers_without_the_agent_account(
    runtime: FleetRuntime,
) -> None:
    node = sorted(runtime.software)[0]
    wrong = basic(DEFAULT_USERNAME, "guess")
    for auth in (None, wrong):
        status, err = await call(runtime, "POST", f"/agents/{node}/reboot", auth=auth)
        assert status == 401 and "credentials" in err["error"]
        status, _ = await call(runtime, "GET", f"/agents/{node}", auth=auth)
        assert status == 401
    _, ledger = await call(runtime, "GET", "/agents/ledger")
    assert ledger == []  # nothing was done, nothing recorded
    assert runtime.software[node].phase.value == "ready"


async def test_secure_boot_rejects_the_unsigned_module_at_the_next_boot(
    runtime: FleetRuntime,
) -> None:
    node = sorted(runtime.software)[1]
    status, _ = await call(
        runtime, "PUT", f"/agents/{node}/faults", {"secure_boot_rejects_module": True}
    )
    assert status == 200
    await call(runtime, "POST", f"/agents/{node}/install-driver", {"version": "580.95.05"})
    status, state = await call(runtime, "POST", f"/agents/{node}/reboot")
    assert status == 200 and state["phase"] == "module_rejected"
    assert state["module_rejected"] and state["loaded_module"] is None
    assert not state["diag_passed"]
