"""The README's "Operating a stack" walkthrough as a user types it: `lockstep up`, then, in
another shell with no LOCKSTEP_* exported, the fleet commands find the stack by themselves."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lockstep_cli.polling import until
from tests.e2e.test_up import LOCKSTEP, Up

AGENT = str(Path(LOCKSTEP).with_name("lockstep-agent"))

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

STACK = """\
gb200:
  bmc: GB200Nvl-24.12-8
  gpu_vbios: 97.00.6C.00.03
hgx-h100:
  bmc: HGX-22.10-1-rc57
  gpu_vbios: 96.00.89.00.01
"""


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="lockstep-e2e-op-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def lockstep(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A command in a shell where nothing LOCKSTEP_* is exported, run from ``cwd``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    return subprocess.run(
        [LOCKSTEP, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def eventually(
    attempt: Callable[[], subprocess.CompletedProcess[str]], what: str
) -> subprocess.CompletedProcess[str]:
    """Run ``attempt`` until it exits 0 (on state, not time: each try is a whole command)."""

    async def once() -> subprocess.CompletedProcess[str] | None:
        done = await asyncio.to_thread(attempt)
        return done if done.returncode == 0 else None

    return asyncio.run(until(once, what, timeout_s=60))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def enroll_and_revoke_agents(workdir: Path) -> None:
    """`lockstep agent enroll|revoke` against the running stack (its inventory and server)."""
    # One NATS identity per node agent: the sites come from the inventory, an unknown
    # node is refused with nothing written, the running nats-server reloads its users.
    unknown = lockstep(workdir, "agent", "enroll", "node-00000", "node-09999")
    assert unknown.returncode == 2 and "unknown node(s) node-09999" in unknown.stderr
    assert not (workdir / ".data" / "agents.json").exists()
    enrolled = lockstep(workdir, "agent", "enroll", "node-00000", "node-00001")
    assert enrolled.returncode == 0, enrolled.stderr
    assert "enrolled 2 node agent(s)" in enrolled.stdout
    assert "1 nats-server(s) reloaded" in enrolled.stdout
    seeds = workdir / ".data" / "secrets" / "agents"
    assert sorted(p.name for p in seeds.iterdir()) == ["node-00000.nk", "node-00001.nk"]
    env = lockstep(workdir, "env", "--as", "agent-node-00000")
    assert env.returncode == 0, env.stderr
    assert f"LOCKSTEP_NATS_NKEY_FILE={seeds / 'node-00000.nk'}" in env.stdout
    assert "LOCKSTEP_NATS_PASSWORD_FILE" not in env.stdout
    revoked = lockstep(workdir, "agent", "revoke", "node-00001")
    assert revoked.returncode == 0, revoked.stderr
    assert sorted(p.name for p in seeds.iterdir()) == ["node-00000.nk"]


def agent_reports(workdir: Path) -> None:
    """docs/agent.md's "Configure" and "Run", after the enrolment above: the config the node
    needs, from `lockstep env --as agent-node-00000`; `lockstep-agent run`; the node's agent
    report in the inventory (`lockstep fleet show`)."""
    env = lockstep(workdir, "env", "--as", "agent-node-00000")
    assert env.returncode == 0, env.stderr
    exported = dict(
        line.removeprefix("export ").split("=", 1)
        for line in env.stdout.splitlines()
        if line.startswith("export ")
    )
    values = {k: shlex.split(v)[0] for k, v in exported.items()}
    root = workdir / "node-root"
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text("580.65.06\n")
    site = next(
        n["site"]
        for n in json.loads(lockstep(workdir, "fleet", "list", "--json").stdout)
        if n["id"] == "node-00000"
    )
    config = workdir / "agent.toml"
    config.write_text(
        f'node = "node-00000"\nsite = "{site}"\n'
        f'nats_url = "{values["LOCKSTEP_NATS_URL"]}"\n'
        f'nkey_file = "{values["LOCKSTEP_NATS_NKEY_FILE"]}"\n'
        f'ca_file = "{values["LOCKSTEP_NATS_CA_FILE"]}"\n'
        f'data_dir = "{workdir / "agent-data"}"\ncadence_s = 1.0\nroot = "{root}"\n'
    )
    env_vars = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    agent = subprocess.Popen(
        [AGENT, "run", "--config", str(config)],
        env=env_vars,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def reported() -> subprocess.CompletedProcess[str]:
            shown = lockstep(workdir, "fleet", "show", "node-00000", "--json")
            seen = shown.returncode == 0 and "agent" in json.loads(shown.stdout)["observations"]
            return shown if seen else subprocess.CompletedProcess(shown.args, 1)

        shown = eventually(reported, "node-00000's agent report in the inventory")
        report = json.loads(shown.stdout)["observations"]["agent"]
        assert report["readable"] and report["components"]["driver"] == "580.65.06", report
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err


def test_fleet_commands_find_the_stack_up_runs_without_exports(workdir: Path) -> None:
    before = lockstep(workdir, "fleet", "list")
    assert before.returncode == 2
    assert "no stack running under .data: start one with `lockstep up --data-dir .data`" in (
        before.stderr
    )
    up = Up(workdir / ".data")
    up.wait_until_up()
    port = free_port()
    sim = subprocess.Popen(
        [
            LOCKSTEP,
            "sim",
            "serve",
            "--nodes",
            "4",
            "--profile",
            "mixed",
            "--host-base",
            "127.78.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        creds = workdir / "bmc.json"
        creds.write_text(
            json.dumps({"default": {"username": "operator", "password": "lockstep-sim"}})
        )
        creds.chmod(0o600)
        fleet_url = f"http://127.78.0.1:{port}/fleet.json"
        for _ in range(100):  # the simulator answers within a second
            imported = lockstep(
                workdir, "fleet", "-v", "import", fleet_url, "--credentials", f"file:{creds}"
            )
            if imported.returncode == 0:
                break
        assert imported.returncode == 0, imported.stderr
        assert "imported 4 node(s): 4 added" in imported.stdout
        assert f"from .data/stack.json (lockstep up, pid {up.proc.pid}) as cli" in imported.stderr
        enroll_and_revoke_agents(workdir)
        swept = lockstep(workdir, "fleet", "sweep", "--json")
        assert swept.returncode == 0, swept.stderr
        assert json.loads(swept.stdout)["sweep"]["unreadable"] == 0
        (workdir / "stack.yaml").write_text(STACK)
        pinned = lockstep(
            workdir, "fleet", "pin", "--scope", "site=site-ams1", "--stack", "stack.yaml", "--json"
        )
        assert pinned.returncode == 0, pinned.stderr
        stack_hash = json.loads(pinned.stdout)["stack_hash"]
        ids = [n["id"] for n in json.loads(lockstep(workdir, "fleet", "list", "--json").stdout)]
        for _ in range(100):  # until the inventory applied the pin and the sweep judged it
            lockstep(workdir, "fleet", "sweep")
            admitted = lockstep(
                workdir, "fleet", "admit", "--stack-hash", stack_hash, "--nodes", ",".join(ids)
            )
            if admitted.returncode == 0:
                break
        assert admitted.returncode == 0, admitted.stdout + admitted.stderr
        assert all(f"{i}  admitted" in admitted.stdout for i in ids)
        dlq = lockstep(workdir, "dlq", "list", "inventory", "--json")
        assert dlq.returncode == 0 and json.loads(dlq.stdout) == [], dlq.stderr
        # Last: an agent report makes its node's admission judge the agent's facts too.
        agent_reports(workdir)
    finally:
        sim.send_signal(signal.SIGTERM)
        sim.wait(timeout=30)
        assert up.interrupt() == 0, "".join(up.output)
    after = lockstep(workdir, "fleet", "list")
    assert after.returncode == 2 and "no stack running under .data" in after.stderr


SIM = (LOCKSTEP, "sim", "serve", "--nodes", "4", "--profile", "mixed")
NO_DATABASE = "postgresql://nobody@127.0.0.1:1/nothing"
"""A DSN that reaches nothing: what the operator's commands get in place of the admin's."""


def test_the_walkthrough_needs_no_database_credentials(workdir: Path) -> None:
    """Issue 26 item 3: `lockstep env --as cli` and `--as reader` carry no DSN, and the
    walkthrough's operator commands work with `--as cli`'s exports alone (a DSN that reaches no
    database set on top, so that none can fall back to one): the services answer every one
    over the bus."""
    up = Up(workdir / ".data")
    up.wait_until_up()
    port = free_port()
    sim = subprocess.Popen(
        [*SIM, "--host-base", "127.79.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        exported = lockstep(workdir, "env", "--as", "cli")
        assert exported.returncode == 0, exported.stderr
        assert "LOCKSTEP_DATABASE_URL" not in exported.stdout
        as_reader = lockstep(workdir, "env", "--as", "reader")
        assert as_reader.returncode == 0 and "LOCKSTEP_DATABASE_URL" not in as_reader.stdout
        as_admin = lockstep(workdir, "env", "--as", "admin")
        assert "LOCKSTEP_DATABASE_URL" in as_admin.stdout  # migrations, topology: the admin's
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
        for line in exported.stdout.splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = shlex.split(value)[0]
        env["LOCKSTEP_DATABASE_URL"] = NO_DATABASE

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [LOCKSTEP, *args],
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )

        creds = workdir / "bmc.json"
        creds.write_text(
            json.dumps({"default": {"username": "operator", "password": "lockstep-sim"}})
        )
        creds.chmod(0o600)
        url = f"http://127.79.0.1:{port}/fleet.json"
        imported = eventually(
            lambda: cli("fleet", "import", url, "--credentials", f"file:{creds}"), "import"
        )
        assert "imported 4 node(s): 4 added" in imported.stdout
        swept = cli("fleet", "sweep", "--json")
        assert swept.returncode == 0, swept.stderr
        assert json.loads(swept.stdout)["sweep"]["unreadable"] == 0
        (workdir / "stack.yaml").write_text(STACK)
        pinned = cli("fleet", "pin", "--scope", "site=site-ams1", "--stack", "stack.yaml", "--json")
        assert pinned.returncode == 0, pinned.stderr
        status = cli("fleet", "status")
        assert status.returncode == 0, status.stderr
        removed = cli("fleet", "remove", "node-00003")
        assert removed.returncode == 0 and "removed 1 node(s)" in removed.stdout, removed.stderr
        dlq = cli("dlq", "list", "inventory", "--json")
        assert dlq.returncode == 0 and json.loads(dlq.stdout) == [], dlq.stderr
        rollouts = cli("rollout", "list", "--json")
        assert rollouts.returncode == 0 and json.loads(rollouts.stdout) == [], rollouts.stderr
        for done in (imported, swept, pinned, status, removed, dlq, rollouts):
            assert "127.0.0.1:1" not in done.stderr and "nobody" not in done.stderr
    finally:
        sim.send_signal(signal.SIGTERM)
        sim.wait(timeout=30)
        assert up.interrupt() == 0, "".join(up.output)
