"""The container image builds and the compose deployment, started from what `lockstep deploy
init` wrote, completes a rollout on the simulator (issue 31: "a deployment that is built and
run, not only written").

Opt-in: it takes minutes (an image build, a three-node NATS cluster, PostgreSQL, five services
and the simulator) and CI's budget is 25, so it runs only with ``LOCKSTEP_CONTAINER_TESTS=1``
(``./dev test-containers``) and a container engine (podman with podman-compose, or docker with
its compose plugin); otherwise it skips saying so. Where no image registry is reachable,
``LOCKSTEP_CONTAINER_BASE`` names a base image made from Debian packages (docs/operations.md,
"Building where no registry is reachable").

It walks what an operator does, with compose.yaml and the lab overlay compose.sim.yaml:
`deploy init`; the lab's BMC password, an approver's key, a release signer's key in attest's
trust store and a signed bundle, each a file under the deployment's directory; the build; a
staged start (podman-compose 1.0.3 ignores ``depends_on`` conditions: servers, then the
topology job, then the services), every service ready; the simulator's fleet imported by the
`cli` container with the BMC credentials under /run/secrets; every node's agent enrolled
(`lockstep deploy enroll`) and the servers told to read their users again (SIGHUP); the
simulator with its agents; a sweep, the bundle submitted and attested, a rollout started,
approved with the approver's key and watched to ``completed``, all from the operator's
machine as the `cli` identity through the published NATS port; and a `down` in which every
service exits by itself within the engine's 10 s stop timeout (none killed).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockstep_devstack.process import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("inventory", "planner", "updater", "healthgate", "attest")
OPT_IN = "LOCKSTEP_CONTAINER_TESTS"
ENGINE = shutil.which("podman") or shutil.which("docker")
COMPOSE = shutil.which("podman-compose") if ENGINE and ENGINE.endswith("podman") else None
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PROJECT = "lockstep-container-test"
FILES = ("-f", "compose.yaml", "-f", "compose.sim.yaml")
SERVICE_UID = 10001  # the image's user: what it reads must be its own (secrets 0600)
FLEET = [
    "--nodes=36",
    "--profile=gb200",
    "--advertise=sim",
    "--port=18100",
    "--password-file=/run/secrets/sim-bmc-password",
]
"""compose.sim.yaml's fleet options, for `sim serve` before the agents are enrolled."""

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(
        os.environ.get(OPT_IN) != "1",
        reason=f"container test: opt-in, minutes long; run with ./dev test-containers "
        f"({OPT_IN}=1) and podman (podman-compose) or docker",
    ),
    pytest.mark.skipif(ENGINE is None, reason="container test: no podman or docker here"),
]


def compose_command() -> list[str]:
    if COMPOSE:
        return [COMPOSE]
    assert ENGINE is not None
    return [ENGINE, "compose"]


def run(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 600, cwd: Path = ROOT
) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    said = f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"{' '.join(argv)}: exit {done.returncode}\n{said}"
    return done.stdout


def wait_for(what: str, check: object, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)  # polling a container engine: there is no event to wait on here


LOCKSTEP = str(Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin" / "lockstep")


def _own(path: Path) -> None:
    """``path`` and what is below it the services' (uid 10001): root runs this test."""
    for each in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chown(each, SERVICE_UID, SERVICE_UID)


def prepare_lab(directory: Path, work: Path) -> None:
    """What an operator puts into the deployment's directory before the first rollout (the
    README's "Your first rollout", for a deployment): the simulated BMCs' password, given to
    the services in the BMC credentials file; an approver's public key; a release signer's
    public key in attest's trust store; a bundle signed with it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    password = secrets.token_urlsafe(24)
    sim = directory / "sim"
    sim.mkdir(mode=0o700)
    (sim / "bmc-password").write_text(password + "\n")
    (sim / "bmc-password").chmod(0o600)
    _own(sim)
    credentials = directory / "secrets" / "bmc" / "credentials.json"
    with credentials.open("w") as out:  # in place: its owner and mode 0600 stay
        json.dump({"default": {"username": "operator", "password": password}}, out)
    run(LOCKSTEP, "approver", "keygen", "alice", "--out", str(work / "approver"))
    shutil.copy(work / "approver" / "alice.pem", directory / "approvers" / "alice.pem")
    _own(directory / "approvers")
    key = Ed25519PrivateKey.generate()
    signing = work / "signing.key"
    signing.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    signing.chmod(0o600)
    trust = directory / "secrets" / "trust"
    (trust / "keys").mkdir()
    (trust / "keys" / "release-1.pem").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    now = time.time()

    def stamp(offset_s: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + offset_s))

    store = {
        "keys": [
            {
                "kid": "release-1",
                "public_key": "keys/release-1.pem",
                "not_before": stamp(-86400),
                "not_after": stamp(365 * 86400),
            }
        ],
        "revocations": {
            "revoked": [],
            "issued_at": stamp(-3600),
            "next_update": stamp(7 * 86400),
        },
    }
    with (trust / "trust.json").open("w") as out:
        json.dump(store, out)
    _own(trust)
    bundle = directory / "bundles" / "first"
    (bundle / "images").mkdir(parents=True)
    version = "97.00.9A.00.01"
    run(LOCKSTEP, "bundle", "pldm", "gpu", version, "--out", str(bundle / "images/vbios.pldm"))
    (bundle / "sbom.cdx.json").write_text(
        '{"bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1, "components": []}'
    )
    vbios = {
        "version": version,
        "image": "images/vbios.pldm",
        "format": "pldm",
        "banks": "ab",
        "activation": "reset",
        "device": [{"type": 0, "value_hex": "de10"}, {"type": 256, "value_hex": "4129"}],
    }
    manifest = {
        "schema": "lockstep.bundle/v1",
        "bundle_id": "first",
        "bundle_version": "1.0.0",
        "created_at": stamp(0),
        "profiles": {"gb200": {"gpu_vbios": vbios}},
    }
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    run(LOCKSTEP, "bundle", "build", str(bundle), "--key", str(signing), "--kid", "release-1")
    _own(directory / "bundles")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    directory = tmp_path_factory.mktemp("containers") / "deployment"
    run(LOCKSTEP, "deploy", "init", str(directory))
    work = tmp_path_factory.mktemp("operator")
    prepare_lab(directory, work)
    env = {
        **os.environ,
        "APPROVER_KEY": str(work / "approver" / "alice.key"),  # stays with the approver
        "LOCKSTEP_DEPLOY_DIR": str(directory),
        "LOCKSTEP_SCHEDULER_URL": "http://sim:18001",  # compose.sim.yaml's scheduler
        "COMPOSE_PROJECT_NAME": PROJECT,
        # The host's 4222 may be another stack's: the operator's commands use this one.
        "LOCKSTEP_NATS_PORT": str(free_port()),
    }
    assert ENGINE is not None
    build = [ENGINE, "build", "-t", "lockstep:local"]
    base = os.environ.get("LOCKSTEP_CONTAINER_BASE")
    if base:
        build += ["--build-arg", f"BASE={base}"]
    if CA_BUNDLE.exists() and ENGINE.endswith("podman"):
        # The host's CA bundle, so pip in the build trusts what the host trusts.
        build += ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
    run(*build, ".", timeout=3000)
    if base:  # no registry: NATS and PostgreSQL images of the same servers, on the same base
        env |= servers_without_a_registry(base, tmp_path_factory.mktemp("images"))
    up = [*compose_command(), "-p", PROJECT, *FILES]
    try:
        run(*up, "up", "-d", "nats-1", "nats-2", "nats-3", "postgres", env=env)
        yield env
    finally:
        subprocess.run(
            [ENGINE, "rm", "-f", f"{PROJECT}_fleet-list"], capture_output=True, check=False
        )
        subprocess.run([*up, "down", "-v"], cwd=ROOT, env=env, capture_output=True, check=False)


def servers_without_a_registry(base: str, context: Path) -> dict[str, str]:
    """Build images standing in for nats:2.12-alpine and postgres:16-alpine (images/) and
    return the variables compose.yaml takes them by."""
    assert ENGINE is not None
    shutil.copytree(Path(__file__).parent / "images", context, dirs_exist_ok=True)
    nats = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin" / "nats-server"
    shutil.copy(nats, context / "nats" / "nats-server")
    images = {
        "LOCKSTEP_NATS_IMAGE": ("localhost/lockstep-test-nats:local", context / "nats"),
        "LOCKSTEP_POSTGRES_IMAGE": ("localhost/lockstep-test-postgres:local", context / "postgres"),
    }
    for tag, directory in images.values():
        run(ENGINE, "build", "--build-arg", f"BASE={base}", "-t", tag, str(directory), timeout=900)
    return {variable: tag for variable, (tag, _) in images.items()}


def container(env: dict[str, str], service: str) -> str:
    """podman-compose names containers project_service_1, docker compose project-service-1."""
    sep = "_" if COMPOSE else "-"
    return sep.join((env["COMPOSE_PROJECT_NAME"], service, "1"))


def inspect(env: dict[str, str], service: str) -> dict[str, object]:
    assert ENGINE is not None
    out = subprocess.run(
        [ENGINE, "inspect", container(env, service)], capture_output=True, text=True, check=False
    )
    found: list[dict[str, object]] = json.loads(out.stdout or "[]")
    return found[0] if found else {}


def healthy(env: dict[str, str], service: str) -> bool:
    state = inspect(env, service).get("State", {})
    assert isinstance(state, dict)
    health = state.get("Health") or state.get("Healthcheck") or {}
    return isinstance(health, dict) and health.get("Status") == "healthy"


def ready(env: dict[str, str], service: str) -> bool:
    assert ENGINE is not None
    probe = (
        "import urllib.request,sys; "
        "sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9464/readyz').status == 200 "
        "else 1)"
    )
    done = subprocess.run(
        [ENGINE, "exec", container(env, service), "python", "-c", probe],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


# `run` without --no-deps: podman-compose 1.0.3 first runs `up` of every service (a service
# without dependencies hands it none, which means all), the simulator included.


def operator(env: dict[str, str]) -> dict[str, str]:
    """The operator's shell on the host: the `cli` identity through the published NATS port
    (the certificate names 127.0.0.1), its password and the CA from the deployment's files."""
    secrets_dir = Path(env["LOCKSTEP_DEPLOY_DIR"]) / "secrets"
    shell = {k: v for k, v in env.items() if not k.startswith("LOCKSTEP_")}
    return shell | {
        "LOCKSTEP_NATS_URL": f"tls://127.0.0.1:{env['LOCKSTEP_NATS_PORT']}",
        "LOCKSTEP_NATS_USER": "cli",
        "LOCKSTEP_NATS_PASSWORD_FILE": str(secrets_dir / "cli" / "nats-password"),
        "LOCKSTEP_NATS_CA_FILE": str(secrets_dir / "tls" / "ca.pem"),
        "COLUMNS": "200",
    }


def succeeds(*argv: str, env: dict[str, str]) -> bool:
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, check=False, timeout=120)
    return done.returncode == 0


def test_the_deployment_builds_starts_completes_a_rollout_and_stops(
    deployment: dict[str, str],
) -> None:
    env = deployment
    up = [*compose_command(), "-p", PROJECT, *FILES]
    directory = env["LOCKSTEP_DEPLOY_DIR"]
    shell = operator(env)
    for server in ("nats-1", "nats-2", "nats-3", "postgres"):
        # podman's healthchecks run from a timer the test machine may not have: poll them.
        wait_for(f"{server} healthy", lambda s=server: healthy(env, s) or _check(env, s))
    run(*up, "up", "-d", "topology", env=env)
    wait_for("the topology job", lambda: _exited(env, "topology") is not None)
    assert _exited(env, "topology") == 0, _logs(env, "topology")
    run(*up, "up", "-d", *SERVICES, env=env)
    for service in SERVICES:
        wait_for(f"{service} ready", lambda s=service: ready(env, s), timeout_s=180)

    # The fleet, from the simulator's list, before its agents have identities: `sim serve`.
    fleet_list = f"{PROJECT}_fleet-list"
    run(*up, "run", "--no-deps", "-d", "--name", fleet_list, "sim", "serve", *FLEET, env=env)
    wait_for("the fleet list", lambda: "fleet at" in _logs_of(fleet_list), timeout_s=120)
    credentials = "file:/run/secrets/bmc-credentials.json"
    imported = run(
        *up, "run", "--no-deps", "--rm", "cli", "fleet", "import", "http://sim:18100/fleet.json",
        "--credentials", credentials, env=env,
    )  # fmt: skip
    assert "imported 36 node(s)" in imported, imported
    assert ENGINE is not None
    run(ENGINE, "rm", "-f", fleet_list)

    # Every node's agent its own identity; the servers read their users again.
    enrolled = run(LOCKSTEP, "deploy", "enroll", directory, "--all", env=shell)
    assert "enrolled 36 node agent(s)" in enrolled, enrolled
    for server in ("nats-1", "nats-2", "nats-3"):
        run(ENGINE, "kill", "--signal", "HUP", container(env, server))
    for server in ("nats-1", "nats-2", "nats-3"):
        wait_for(
            f"{server} reloaded",
            lambda s=server: "Reloaded server configuration" in _logs_of(container(env, s)),
        )
    run(*up, "up", "-d", "sim", env=env)
    sim = container(env, "sim")
    wait_for("the simulator's agents", lambda: "fleet list:" in _logs_of(sim), timeout_s=180)

    lockstep = (LOCKSTEP,)
    wait_for("a sweep", lambda: succeeds(*lockstep, "fleet", "sweep", env=shell), timeout_s=300)
    submitted = run(*lockstep, "bundle", "submit", "/srv/bundles/first", "--wait", "180", env=shell)
    assert "attested" in submitted, submitted
    scope = ("--bundle", "first", "--scope", "site=site-ams1", "--class", "routine")
    started = json.loads(run(*lockstep, "rollout", "start", *scope, "--json", env=shell))
    rollout = str(started["rollout_id"])
    key = env["APPROVER_KEY"]
    approved = run(
        *lockstep, "rollout", "approve", rollout, "--key", key, "--as", "alice", env=shell
    )
    assert "approve done" in approved, approved
    watched = run(*lockstep, "rollout", "status", "--watch", rollout, env=shell, timeout=1500)
    assert "completed" in watched.splitlines()[-1], watched[-3000:]
    # The CLI inside the deployment, as the `cli` container, says so too.
    listed = run(*up, "run", "--no-deps", "--rm", "cli", "rollout", "list", "--json", env=env)
    rows = next(json.loads(line) for line in listed.splitlines() if line.startswith("[{"))
    done = {r["rollout_id"]: (r["state"], r["nodes"], r["approvals"]) for r in rows}
    assert done[rollout] == ("completed", 36, 1), listed[-2000:]

    for service in (*SERVICES, "sim"):
        began = time.monotonic()
        run(ENGINE, "stop", "-t", "10", container(env, service))
        took = time.monotonic() - began
        code = _exited(env, service)
        assert code == 0, f"{service} exited {code} after {took:.1f} s:\n{_logs(env, service)}"


def _logs_of(name: str) -> str:
    assert ENGINE is not None
    done = subprocess.run([ENGINE, "logs", name], capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def _check(env: dict[str, str], service: str) -> bool:
    assert ENGINE is not None
    done = subprocess.run(
        [ENGINE, "healthcheck", "run", container(env, service)], capture_output=True, check=False
    )
    return done.returncode == 0


def _exited(env: dict[str, str], service: str) -> int | None:
    state = inspect(env, service).get("State", {})
    assert isinstance(state, dict)
    if state.get("Status") in ("exited", "stopped"):
        code = state.get("ExitCode")
        return int(code) if isinstance(code, int) else None
    return None


def _logs(env: dict[str, str], service: str) -> str:
    assert ENGINE is not None
    done = subprocess.run(
        [ENGINE, "logs", "--tail", "40", container(env, service)],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout + done.stderr
