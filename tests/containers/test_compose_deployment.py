"""The container image builds and the compose deployment starts from what `lockstep deploy
init` wrote (issue 31: "a deployment that is built and run, not only written").

Opt-in: it takes minutes (an image build, a three-node NATS cluster, PostgreSQL and five
services) and CI's budget is 25, so it runs only with ``LOCKSTEP_CONTAINER_TESTS=1`` and a
container engine (podman with podman-compose, or docker with its compose plugin); otherwise it
skips saying so. Where no image registry is reachable, ``LOCKSTEP_CONTAINER_BASE`` names a base
image made from Debian packages (docs/operations.md, "Building where no registry is reachable").

It walks what an operator does: `deploy init`, build, a staged start (podman-compose 1.0.3
ignores ``depends_on`` conditions: servers, then the topology job, then the services), every
service ready, the CLI answered as the `cli` identity, and a `down` in which every service
exits by itself within the engine's 10 s stop timeout (none killed).
"""

from __future__ import annotations

import json
import os
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

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(
        os.environ.get(OPT_IN) != "1",
        reason=f"container test: opt-in, minutes long; run with {OPT_IN}=1 and podman "
        "(podman-compose) or docker",
    ),
    pytest.mark.skipif(ENGINE is None, reason="container test: no podman or docker here"),
]


def compose_command() -> list[str]:
    if COMPOSE:
        return [COMPOSE]
    assert ENGINE is not None
    return [ENGINE, "compose"]


def run(*argv: str, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    done = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr[-4000:]}"
    return done.stdout


def wait_for(what: str, check: object, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1)  # polling a container engine: there is no event to wait on here


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    directory = tmp_path_factory.mktemp("containers") / "deployment"
    lockstep = str(Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin" / "lockstep")
    run(lockstep, "deploy", "init", str(directory))
    env = {
        **os.environ,
        "LOCKSTEP_DEPLOY_DIR": str(directory),
        "LOCKSTEP_SCHEDULER_URL": "http://scheduler.invalid:8080",
        "COMPOSE_PROJECT_NAME": PROJECT,
        # The host's 4222 may be another stack's; nothing here connects from outside.
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
    up = [*compose_command(), "-p", PROJECT, "-f", "compose.yaml"]
    try:
        run(*up, "up", "-d", "nats-1", "nats-2", "nats-3", "postgres", env=env)
        yield env
    finally:
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


def test_the_image_builds_and_the_deployment_starts_serves_and_stops(
    deployment: dict[str, str],
) -> None:
    env = deployment
    up = [*compose_command(), "-p", PROJECT, "-f", "compose.yaml"]
    for server in ("nats-1", "nats-2", "nats-3", "postgres"):
        # podman's healthchecks run from a timer the test machine may not have: poll them.
        wait_for(f"{server} healthy", lambda s=server: healthy(env, s) or _check(env, s))
    run(*up, "up", "-d", "topology", env=env)
    wait_for("the topology job", lambda: _exited(env, "topology") is not None)
    assert _exited(env, "topology") == 0, _logs(env, "topology")
    run(*up, "up", "-d", *SERVICES, env=env)
    for service in SERVICES:
        wait_for(f"{service} ready", lambda s=service: ready(env, s), timeout_s=180)
    answer = run(*up, "run", "--rm", "cli", "rollout", "list", env=env)
    assert "rollout" in answer.lower() or answer.strip() == "", answer
    assert ENGINE is not None
    for service in SERVICES:
        started = time.monotonic()
        run(ENGINE, "stop", "-t", "10", container(env, service))
        took = time.monotonic() - started
        code = _exited(env, service)
        assert code == 0, f"{service} exited {code} after {took:.1f} s:\n{_logs(env, service)}"


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
