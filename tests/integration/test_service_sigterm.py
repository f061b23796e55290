"""A service process exits within 10 s of SIGTERM (issue 31): a container engine's default stop
timeout is 10 s, after which it kills the process mid-work (attest, the updater and the
healthgate were killed so at `docker compose down`). The bound is scaled to this machine's
speed (tests/speed.py), as every deadline of the suite is."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lockstep_cli.polling import until
from lockstep_devstack.process import free_port
from tests.speed import slowdown

pytestmark = pytest.mark.integration
STOP_TIMEOUT_S = 10.0  # Docker's and podman's default stop timeout (compose's stop_grace_period)


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@pytest.mark.parametrize("name", ["attest", "updater", "healthgate"])
async def test_a_ready_service_exits_cleanly_within_10_s_of_sigterm(
    name: str, servers: Any, namespace: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCKSTEP_", "PG"))}
    env |= {
        "LOCKSTEP_NATS_URL": servers.nats_url,
        "LOCKSTEP_DATABASE_URL": servers.database_url,
        "LOCKSTEP_NAMESPACE": namespace,
        f"LOCKSTEP_{name.upper()}_DB_SCHEMA": f"{namespace}_{name}",
        f"LOCKSTEP_{name.upper()}_HTTP_PORT": str(port),
    }
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", f"lockstep_{name}", env=env, stdout=out, stderr=out
        )
    try:

        async def serving() -> bool:
            assert proc.returncode is None, log.read_text()
            return await asyncio.to_thread(ready, port)

        await until(serving, what=f"{name} ready", timeout_s=60 * slowdown())
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), timeout=2 * STOP_TIMEOUT_S * slowdown())
        took = time.monotonic() - sent
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    print(f"{name}: exited {code} {took:.2f} s after SIGTERM")
    assert code == 0, log.read_text()
    assert took < STOP_TIMEOUT_S * slowdown(), f"{name} took {took:.1f} s:\n{log.read_text()}"
    assert f"{name} stopped" in log.read_text()
