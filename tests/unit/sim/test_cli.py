"""The ``sim serve`` / ``sim run`` typer sub-app: options, defaults and what reaches the fleet
(the servers themselves are not started)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_common.natsconn import NatsAccess
from lockstep_sim import cli
from lockstep_sim.cli import sim_app
from lockstep_sim.options import SimOptions
from lockstep_sim.runtime import FleetRuntime

pytestmark = pytest.mark.unit


def test_serve_help_lists_options_and_default_credentials() -> None:
    result = CliRunner().invoke(sim_app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in (
        "--nodes",
        "--profile",
        "--latency-ms",
        "--time-scale",
        "--seed",
        "--username",
        "--password-file",
    ):
        assert option in result.output
    assert "lockstep-sim" in result.output


@pytest.mark.parametrize("command", ["serve", "run"])
def test_unknown_profile_is_refused(command: str) -> None:
    result = CliRunner().invoke(sim_app, [command, "--profile", "dgx"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "choose one of gb200" in result.output


@pytest.mark.parametrize("command", ["serve", "run"])
def test_unknown_dialect_is_refused(command: str) -> None:
    result = CliRunner().invoke(sim_app, [command, "--dialect", "dell"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "choose one of lockstep, dmtf-generic, nvidia-gb200-nvl" in " ".join(
        result.output.split()
    )


def test_serve_hands_the_dialect_to_the_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[SimOptions] = []
    monkeypatch.setattr(cli, "serve", served.append)
    result = CliRunner().invoke(sim_app, ["serve", "--dialect", "nvidia-gb200-nvl"])
    assert result.exit_code == 0, result.output
    assert [o.dialect for o in served] == ["nvidia-gb200-nvl"]
    assert SimOptions().dialect == "lockstep"  # the default: the simulator's own shape


def test_serve_hands_the_options_to_the_simulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - kind: hang\n    nodes: [node-00001]\n")
    served: list[SimOptions] = []
    monkeypatch.setattr(cli, "serve", served.append)
    args = ["serve", "--nodes", "3", "--profile", "hgx-h100", "--time-scale", "0.5"]
    args += ["--host-base", "127.9.0.1", "--port", "0", "--faults", str(plan)]
    result = CliRunner().invoke(sim_app, args)
    assert result.exit_code == 0, result.output
    [options] = served
    assert (options.nodes, options.profile, options.time_scale) == (3, "hgx-h100", 0.5)
    assert (options.host_base, options.port, options.username) == ("127.9.0.1", 0, "admin")
    assert options.faults is not None
    assert [f.kind for f in options.faults.faults] == ["hang"]


def test_run_hands_its_options_to_the_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    runtimes: list[FleetRuntime] = []

    async def record(runtime: FleetRuntime) -> None:
        runtimes.append(runtime)

    monkeypatch.setattr(cli, "_run_until_signalled", record)
    args = ["run", "--nodes", "2", "--seed", "9", "--port", "0", "--scheduler-port", "0"]
    args += ["--namespace", "lab", "--cadence-s", "2"]
    result = CliRunner().invoke(sim_app, args)
    assert result.exit_code == 0, result.output
    [runtime] = runtimes
    assert [n.id for n in runtime.fleet] == ["node-00000", "node-00001"]
    assert (runtime.seed, runtime.simulator.port, runtime.scheduler_port) == (9, 0, 0)
    assert (runtime.namespace, runtime.cadence_s, runtime.nats) == ("lab", 2.0, None)


def test_run_connects_its_agents_as_an_identity_whose_password_is_in_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtimes: list[FleetRuntime] = []

    async def record(runtime: FleetRuntime) -> None:
        runtimes.append(runtime)

    async def reachable(access: object) -> None:
        return None  # no NATS here: the probe `sim run` makes first is answered "reachable"

    monkeypatch.setattr(cli, "_run_until_signalled", record)
    monkeypatch.setattr(cli, "_unreachable", reachable)
    secret = tmp_path / "agent-password"
    secret.write_text("s3cret\n")
    secret.chmod(0o644)
    args = ["run", "--nodes", "1", "--port", "0", "--scheduler-port", "0"]
    args += ["--nats-url", "tls://127.0.0.1:4222", "--nats-password-file", str(secret)]
    refused = CliRunner().invoke(sim_app, [*args, "--nats-user", "agent"])
    assert refused.exit_code == 2 and "open to other users" in refused.output
    assert "s3cret" not in refused.output
    secret.chmod(0o600)
    no_user = CliRunner().invoke(sim_app, args)
    assert no_user.exit_code == 2 and "needs a password file" in no_user.output
    ok = CliRunner().invoke(sim_app, [*args, "--nats-user", "agent"])
    assert ok.exit_code == 0, ok.output
    [runtime] = runtimes
    assert runtime.nats is not None
    assert (runtime.nats.user, runtime.nats.password_file) == ("agent", secret)


def test_the_bmc_password_comes_from_a_file_or_the_environment_never_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[SimOptions] = []
    monkeypatch.setattr(cli, "serve", served.append)
    refused = CliRunner().invoke(sim_app, ["serve", "--password", "s3cret"])
    assert refused.exit_code == 2  # no such option: a password on argv is visible to every user

    monkeypatch.setenv("LOCKSTEP_SIM_PASSWORD", "from-env")
    assert CliRunner().invoke(sim_app, ["serve"]).exit_code == 0
    secret = tmp_path / "password"
    secret.write_text("from-file\n")
    assert CliRunner().invoke(sim_app, ["serve", "--password-file", str(secret)]).exit_code == 0
    assert [o.password for o in served] == ["from-env", "from-file"]

    result = CliRunner().invoke(sim_app, ["serve", "--password-file", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert "cannot read" in result.output


def test_run_with_agent_seeds_probes_nats_as_a_node_agent_not_anonymously(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment's servers refuse anonymous clients: with --agent-seeds and no shared
    identity (compose.sim.yaml), the reachability probe logs in as the first node's agent."""
    probed: list[object] = []

    async def record(runtime: FleetRuntime) -> None:
        return None

    async def reachable(access: object) -> None:
        probed.append(access)

    monkeypatch.setattr(cli, "_run_until_signalled", record)
    monkeypatch.setattr(cli, "_unreachable", reachable)
    args = ["run", "--nodes", "2", "--port", "0", "--scheduler-port", "0"]
    args += ["--nats-url", "tls://nats-1:4222", "--agent-seeds", str(tmp_path)]
    result = CliRunner().invoke(sim_app, args)
    assert result.exit_code == 0, result.output
    [access] = probed
    assert isinstance(access, NatsAccess)
    assert (access.user, access.nkey_file) == ("agent-node-00000", tmp_path / "node-00000.nk")
