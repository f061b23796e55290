"""Fixtures: an in-process simulator on loopback and an authenticated HTTP client."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lockstep_cli.polling import until
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.simulator import Simulator
from tests.reference import REFERENCE

REPO = Path(__file__).resolve().parents[3]
CSDL = REFERENCE / "redfish-csdl"
BIN = REPO / ".venv" / "bin"
AUTH = {
    "Authorization": "Basic "
    + base64.b64encode(f"{DEFAULT_USERNAME}:{DEFAULT_PASSWORD}".encode()).decode()
}


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(
        SimOptions(2, "gb200", time_scale=0.002, seed=7, host_base="127.42.0.1", port=0)
    ) as simulator:
        yield simulator


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(headers=AUTH) as session:
        yield session


async def get_json(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(url) as reply:
        assert reply.status == 200, await reply.text()
        body: dict[str, Any] = await reply.json()
        return body


async def wait_task(http: aiohttp.ClientSession, monitor_url: str, timeout_s: float = 20) -> Any:
    """The task's final body, once its monitor stops answering 202."""

    async def finished() -> Any:
        async with http.get(monitor_url) as reply:
            body = await reply.json()
            if reply.status == 202:
                return None
            assert reply.status == 200, body
            return body

    return await until(finished, what=f"task {monitor_url} to finish", timeout_s=timeout_s)
