"""``lockstep fleet ...`` against the running inventory service (real NATS + PostgreSQL).

The commands call ``asyncio.run``, so async tests run them in a thread (``cli``) while the
service keeps running on the test's event loop.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app
from tests.integration.inventory_service.conftest import SITE, Harness, harness

__all__ = ["SITE", "Harness", "cli", "cli_json", "env", "harness"]


@pytest.fixture
def env(servers: Any, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's settings point at the test's servers, namespace and inventory schema."""
    monkeypatch.setenv("LOCKSTEP_NATS_URL", servers.nats_url)
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", servers.database_url)
    monkeypatch.setenv("LOCKSTEP_NAMESPACE", namespace)
    monkeypatch.setenv("LOCKSTEP_INVENTORY_DB_SCHEMA", f"{namespace}_inventory")
    monkeypatch.setenv("LOCKSTEP_INVENTORY_SWEEP_RETRIES", "0")
    monkeypatch.setenv("LOCKSTEP_INVENTORY_SWEEP_TIMEOUT_S", "3")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


async def cli(*args: str) -> tuple[int, str]:
    """Run ``lockstep`` in a thread: its asyncio.run cannot nest in the test's loop."""
    return await asyncio.to_thread(run, *args)


async def cli_json(*args: str) -> Any:
    code, out = await cli(*args, "--json")
    assert code == 0, out
    return json.loads(out)
