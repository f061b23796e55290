"""``lockstep bmc probe``: which profile a BMC matches, how it would be flashed and what
preflight would refuse, with nothing written to the BMC (its ledger shows only the login and
the logout)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, OPERATOR_USERNAME, SimOptions
from lockstep_sim.simulator import Simulator

pytestmark = pytest.mark.integration
NODE = "node-00000"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


async def cli(*args: str) -> tuple[int, str]:
    """``lockstep`` in a thread: its asyncio.run cannot nest in the simulator's loop."""
    return await asyncio.to_thread(_run, *args)


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimOptions(1, "gb200", host_base="127.75.0.1", port=0)) as simulator:
        yield simulator


@pytest.fixture
async def smc() -> AsyncIterator[Simulator]:
    """A Supermicro-dialect BMC: profile supermicro-x13 activates with Manager.Reset."""
    options = SimOptions(1, "gb200", dialect="supermicro-x13", host_base="127.75.1.1", port=0)
    async with Simulator(options) as simulator:
        yield simulator


@pytest.fixture
def creds(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PROBE_USERNAME", OPERATOR_USERNAME)  # Operator-class, as Lockstep uses
    monkeypatch.setenv("PROBE_PASSWORD", DEFAULT_PASSWORD)
    return "env:PROBE"


def writes(sim: Simulator) -> list[str]:
    """Every mutating call the BMC recorded, other than logging in and out."""
    actions = [e["action"] for e in sim.bmc(NODE).ledger]
    return [a for a in actions if a not in {"session_create", "session_delete"}]


async def test_probe_reports_the_profile_the_plan_and_writes_nothing(
    sim: Simulator, creds: str
) -> None:
    url = sim.bmc_url(NODE)
    code, out = await cli(
        "bmc", "probe", url, "--credentials", creds, "--allow-plain-http", "--json"
    )
    assert code == 0, out
    found = json.loads(out)
    assert found["refusals"] == []
    assert found["login"] == "session"
    assert found["push"] == "multipart"
    assert found["push_uri"] == "/redfish/v1/UpdateService/update-multipart"
    assert found["profile"] == "lockstep-sim"  # the simulator's own dialect says Oem.LockstepSim
    assert found["targets"]["gpu_vbios"] == [f"HGX_FW_GPU_{i}" for i in range(4)]
    assert set(found["targets"]) == {"bios", "bmc", "cpld", "erot", "gpu_vbios", "nic"}
    assert writes(sim) == []
    ledger = [e["action"] for e in sim.bmc(NODE).ledger]
    assert ledger == ["session_create", "session_delete"]  # logged out, too


async def test_probe_refuses_the_administrator_account_as_the_updater_does(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADMIN_USERNAME", DEFAULT_USERNAME)
    monkeypatch.setenv("ADMIN_PASSWORD", DEFAULT_PASSWORD)
    url = sim.bmc_url(NODE)
    code, out = await cli("bmc", "probe", url, "--credentials", "env:ADMIN", "--allow-plain-http")
    assert code == 1, out
    assert "Administrator-class credentials are refused" in " ".join(out.split())
    assert writes(sim) == []


async def test_probe_says_what_preflight_would_refuse_in_one_line_each(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim.bmc(NODE).accounts.add("viewer", "viewer-pass", "ReadOnly")
    monkeypatch.setenv("RO_USERNAME", "viewer")
    monkeypatch.setenv("RO_PASSWORD", "viewer-pass")
    url = sim.bmc_url(NODE)
    args = ("bmc", "probe", url, "--credentials", "env:RO", "--allow-plain-http")
    code, out = await cli(*args, "--component", "bios", "--component", "bbu")
    assert code == 1, out
    refused = [line for line in out.splitlines() if line.startswith("refused: ")]
    head = "refused: BMC 127.75.0.1 (profile lockstep-sim)"
    assert refused == [
        f"{head}: the account lacks what the profile's calls need (DSP8011: ConfigureComponents "
        "for the UpdateService push (multipart, simple_update), UpdateService.Activate; it "
        "holds: ConfigureSelf, Login)",
        f"{head}: no FirmwareInventory member holds bbu",
    ]
    assert writes(sim) == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ("--credentials", "vault:x"),
            "--credentials 'vault:x': expected env:PREFIX or file:/path",
        ),
        (("--credentials", "file:/nonexistent/creds.json"), "no such file"),
        (("--credentials", "env:PROBE", "--component", "toaster"), "--component: 'toaster'"),
        (("--credentials", "env:PROBE", "--profile", "dell"), "--profile: no BMC profile 'dell'"),
    ],
)
async def test_bad_input_is_one_line_and_nothing_reaches_the_bmc(
    sim: Simulator, creds: str, extra: tuple[str, ...], message: str
) -> None:
    code, out = await cli("bmc", "probe", sim.bmc_url(NODE), "--allow-plain-http", *extra)
    assert code == 2
    assert message in " ".join(out.split())
    assert sim.bmc(NODE).ledger == []


async def test_a_credentials_file_others_may_read_is_refused(
    sim: Simulator, tmp_path: Path
) -> None:
    secret = tmp_path / "creds.json"
    secret.write_text(json.dumps({"default": {"username": "u", "password": "p"}}))
    secret.chmod(0o644)
    code, out = await cli(
        "bmc", "probe", sim.bmc_url(NODE), "--credentials", f"file:{secret}", "--allow-plain-http"
    )
    assert code == 2 and "group or others may read it" in out
    assert sim.bmc(NODE).ledger == []


async def test_plain_http_needs_the_explicit_allowance(sim: Simulator, creds: str) -> None:
    code, out = await cli("bmc", "probe", sim.bmc_url(NODE), "--credentials", creds)
    assert code == 2 and "refusing to send credentials over plain http" in " ".join(out.split())
    assert sim.bmc(NODE).ledger == []


async def test_probe_names_the_privileges_the_profile_needs_and_what_the_account_holds(
    smc: Simulator, creds: str
) -> None:
    url = smc.bmc_url(NODE)
    args = ("bmc", "probe", url, "--credentials", creds, "--allow-plain-http")
    code, out = await cli(*args, "--json")
    assert code == 0, out
    found = json.loads(out)
    assert found["profile"] == "supermicro-x13" and found["refusals"] == []
    assert found["privileges_needed"]["ConfigureManager"] == [
        "Manager.Reset of /redfish/v1/Managers/1",
        "the flip-back's PATCH of a Manager's image link",
    ]
    assert set(found["privileges_needed"]) == {"ConfigureComponents", "ConfigureManager", "Login"}
    assert "ConfigureUsers" not in found["privileges_held"]  # the dialect's FirmwareOperator
    code, text = await cli(*args)
    assert code == 0, text
    assert "needs ConfigureManager: Manager.Reset of /redfish/v1/Managers/1" in text
    assert "preflight: nothing refused" in text
    assert writes(smc) == []


async def test_probe_refuses_an_operator_and_a_reset_type_the_bmc_does_not_allow(
    smc: Simulator, creds: str
) -> None:
    bmc = smc.bmc(NODE)
    account = bmc.accounts.by_name(OPERATOR_USERNAME)
    assert account is not None
    account.role = "Operator"  # the predefined role: no ConfigureManager
    # Managers/1 allows ForceRestart only: the profile's GracefulRestart would be refused (400)
    # once the node is drained and its image written.
    bmc.dialect = dataclasses.replace(bmc.dialect, manager_reset_types=("ForceRestart",))
    url = smc.bmc_url(NODE)
    code, out = await cli("bmc", "probe", url, "--credentials", creds, "--allow-plain-http")
    assert code == 1, out
    refused = [line for line in out.splitlines() if line.startswith("refused: ")]
    head = "refused: BMC 127.75.1.1 (profile supermicro-x13)"
    assert refused == [
        f"{head}: the account lacks what the profile's calls need (DSP8011: ConfigureManager "
        "for Manager.Reset of /redfish/v1/Managers/1, the flip-back's PATCH of a Manager's "
        "image link; it holds: ConfigureComponents, ConfigureSelf, Login)",
        f"{head}: the profile's activation reset (manager GracefulRestart): "
        "/redfish/v1/Managers/1: ResetType 'GracefulRestart' not allowed (ForceRestart)",
    ]
    assert writes(smc) == []
