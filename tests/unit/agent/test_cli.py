"""``lockstep-agent``: one line and a non-zero exit for a bad configuration or credential,
before anything starts; ``probe`` on a fake root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_agent.cli import app
from tests.reference import REFERENCE

pytestmark = pytest.mark.unit
runner = CliRunner()


def _config(tmp_path: Path, **fields: str) -> Path:
    seed = tmp_path / "n1.nk"
    seed.write_text("SUAEXAMPLEEXAMPLEEXAMPLE\n")
    seed.chmod(0o600)
    base = {
        "node": '"n1"',
        "site": '"s1"',
        "nats_url": '"tls://127.0.0.1:1"',
        "nkey_file": f'"{seed}"',
        "data_dir": f'"{tmp_path / "data"}"',
    } | fields
    path = tmp_path / "agent.toml"
    path.write_text("".join(f"{k} = {v}\n" for k, v in base.items() if v))
    return path


def _error(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("fields", "where", "message"),
    [
        ({"node": '"n 1"'}, "node", "Value error, node 'n 1' cannot be a NATS subject token"),
        ({"site": ""}, "site", "Field required"),
        ({"cadence_s": "0"}, "cadence_s", "Input should be greater than 0"),
        ({"colour": '"blue"'}, "colour", "Extra inputs are not permitted"),
    ],
)
def test_bad_config_field(tmp_path: Path, fields: dict[str, str], where: str, message: str) -> None:
    path = _config(tmp_path, **fields)
    line = _error(["run", "--config", str(path)])
    assert line.startswith(f"lockstep-agent: config {path}: {where}: {message}"), line
    assert not (tmp_path / "data").exists()  # nothing started, nothing written


def test_config_not_toml_or_missing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("node = \n")
    assert _error(["run", "--config", str(bad)]).startswith(
        f"lockstep-agent: config {bad}: not TOML: "
    )
    missing = tmp_path / "missing.toml"
    assert _error(["run", "--config", str(missing)]) == (
        f"lockstep-agent: config {missing}: No such file or directory"
    )


def test_a_key_others_can_read_is_refused(tmp_path: Path) -> None:
    path = _config(tmp_path)
    (tmp_path / "n1.nk").chmod(0o644)
    assert _error(["run", "--config", str(path)]) == (
        f"lockstep-agent: NATS nkey file {tmp_path / 'n1.nk'} is open to other users "
        "(mode 0644): chmod 600 it"
    )
    assert not (tmp_path / "data").exists()


def test_a_missing_key_is_named(tmp_path: Path) -> None:
    path = _config(tmp_path, nkey_file=f'"{tmp_path / "absent.nk"}"')
    assert _error(["run", "--config", str(path)]) == (
        f"lockstep-agent: NATS nkey file {tmp_path / 'absent.nk'}: No such file or directory"
    )


def test_an_unreadable_ca_is_named(tmp_path: Path) -> None:
    path = _config(tmp_path, ca_file=f'"{tmp_path / "ca.pem"}"')
    assert _error(["run", "--config", str(path)]) == (
        f"lockstep-agent: NATS CA file {tmp_path / 'ca.pem'} cannot be read"
    )


def test_probe_json_of_a_fake_root(tmp_path: Path) -> None:
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_bytes(
        (REFERENCE / "node-agent/issues/proc-driver-nvidia-version.565.57.01-open").read_bytes()
    )
    result = runner.invoke(app, ["probe", "--json", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    assert facts["files"]["driver"]["version"] == "565.57.01"
    assert facts["nvml"]["error"] == "not probed: not the machine's own root"
    text = runner.invoke(app, ["probe", "--root", str(tmp_path)]).stdout
    assert "driver (/proc): 565.57.01 (open module)" in text


def test_probe_of_a_root_that_is_no_directory(tmp_path: Path) -> None:
    assert _error(["probe", "--root", str(tmp_path / "nope")]) == (
        f"lockstep-agent: --root {tmp_path / 'nope'}: not a directory"
    )


def test_the_shipped_example_config_is_valid() -> None:
    from lockstep_agent.config import load

    example = Path(__file__).resolve().parents[3] / "deploy" / "agent" / "agent.toml"
    cfg = load(example)
    assert (cfg.node, cfg.identity) == ("gpu-0001", "agent-gpu-0001")
    assert cfg.access().servers == (
        "tls://nats-1.example.net:4222",
        "tls://nats-2.example.net:4222",
    )
    unit = example.with_name("lockstep-agent.service").read_text()
    assert "lockstep-agent run --config /etc/lockstep-agent/agent.toml" in unit
    assert f"StateDirectory={cfg.data_dir.name}" in unit


def test_command_dry_run_prints_the_plan_and_runs_nothing(tmp_path: Path) -> None:
    cmd = tmp_path / "cmd.json"
    cmd.write_text(
        json.dumps(
            {
                "site": "s1",
                "node_id": "n1",
                "command_id": "c1",
                "action": "install-driver",
                "work_item": "w1",
                "fencing_token": 3,
                "package": "nvidia-driver-580",
                "version": "580.65.06-0ubuntu1",
                "package_sha256": "a" * 64,
            }
        )
    )
    result = runner.invoke(
        app, ["command", str(cmd), "--config", str(_config(tmp_path)), "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "dry-run"
    assert out["ran"][0][1:] in (
        ["download", "nvidia-driver-580=580.65.06-0ubuntu1"],
        ["download", "nvidia-driver-580-580.65.06-0ubuntu1"],
    )


def test_command_file_for_another_node_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    cmd = tmp_path / "cmd.json"
    cmd.write_text(
        json.dumps(
            {
                "site": "s1",
                "node_id": "n2",
                "command_id": "c1",
                "action": "reboot",
                "work_item": "w1",
                "fencing_token": 3,
            }
        )
    )
    line = _error(["command", str(cmd), "--config", str(_config(tmp_path))])
    assert line == f"lockstep-agent: command {cmd}: names node n2 at s1, not this node n1"
    assert not (tmp_path / "data" / "commands.sqlite").exists()


def test_command_file_that_is_no_command(tmp_path: Path) -> None:
    cmd = tmp_path / "cmd.json"
    cmd.write_text('{"command_id": "c1", "action": "format-disk"}')
    line = _error(["command", str(cmd), "--config", str(_config(tmp_path))])
    assert line.startswith(f"lockstep-agent: command {cmd}: ")
    assert "validation error" in line


def test_command_read_state_prints_what_the_node_at_root_runs(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text("580.65.06\n")
    (root / "lib/firmware/nvidia/580.65.06").mkdir(parents=True)
    cmd = tmp_path / "cmd.json"
    cmd.write_text(
        json.dumps(
            {
                "site": "s1",
                "node_id": "n1",
                "command_id": "r1",
                "action": "read-state",
                "work_item": "w1",
                "fencing_token": 0,
            }
        )
    )
    config = _config(tmp_path, root=f'"{root}"')
    result = runner.invoke(app, ["command", str(cmd), "--config", str(config)])
    assert result.exit_code == 0, result.output
    state = json.loads(result.stdout)["state"]
    # A fake root has no DKMS nor GPUs: the loaded module is what is installed, no diagnostic.
    assert (state["phase"], state["loaded_module"], state["firmware_dirs"]) == (
        "ready",
        "580.65.06",
        ["580.65.06"],
    )
    assert state["diag_passed"] is False
