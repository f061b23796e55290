"""The running agent measures and spools while NATS cannot be reached, and says so on its
metrics port (``/metrics``, ``/readyz``)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import pytest

from lockstep_agent.config import AgentConfig
from lockstep_agent.runner import Runner
from lockstep_cli.polling import until

pytestmark = pytest.mark.unit


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return -1.0


async def test_spools_while_nats_is_unreachable_and_exposes_metrics(tmp_path: Path) -> None:
    seed = tmp_path / "n1.nk"
    seed.write_text("SUAEXAMPLE\n")
    seed.chmod(0o600)
    (tmp_path / "root/sys/module/nvidia").mkdir(parents=True)
    (tmp_path / "root/sys/module/nvidia/version").write_text("580.65.06\n")
    config = AgentConfig(
        node="n1",
        site="s1",
        nats_url=f"nats://127.0.0.1:{_closed_port()}",
        nkey_file=seed,
        data_dir=tmp_path / "data",
        cadence_s=0.05,
        root=tmp_path / "root",
        metrics_port=0,
    )
    runner = Runner(config)
    task = asyncio.create_task(runner.run())
    try:
        async with aiohttp.ClientSession() as http:

            async def scraped() -> str | None:
                if runner.endpoint.port is None:
                    return None
                url = f"http://127.0.0.1:{runner.endpoint.port}/metrics"
                async with http.get(url) as resp:
                    text = await resp.text()
                return text if _value(text, "lockstep_agent_spooled_reports") >= 6 else None

            text = await until(scraped, what="6 reports spooled, on /metrics", timeout_s=20)
            assert _value(text, "lockstep_agent_cycles_total") >= 3
            assert "lockstep_agent_nats_connected 0.0" in text
            assert "lockstep_agent_nvml_up 0.0" in text  # a fake root: NVML not asked
            async with http.get(f"http://127.0.0.1:{runner.endpoint.port}/readyz") as resp:
                assert resp.status == 503
                assert (await resp.json())["checks"] == {"nats": False}
    finally:
        runner.stop.set()
        await asyncio.wait_for(task, timeout=10)
