"""An XID logged in the kernel log the agent follows is reported at once, not at the next
cycle: the agent (in this process, logged in with its enrolled nkey on a real nats-server
configured as ``lockstep up`` configures it) runs at a 60 s cadence, and the health report
counting the XID is on the bus within seconds of the line (the gate trips on it; ``lockstep
bench agent --xid`` measures the whole way to ``gate.tripped``). A line that is not an XID
wakes nothing, and an XID is counted once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path

import pytest

from lockstep_agent.config import load as load_config
from lockstep_agent.runner import Runner
from lockstep_cli.polling import until
from lockstep_common import natsconn
from lockstep_common.identities import ADMIN
from tests.integration.agent.test_agent_restart import NODE, NS, SITE, _config, _server, _topology

pytestmark = pytest.mark.integration
XID_79 = "NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=python3, GPU has fallen off the bus."


def _record(seq: int, message: str, priority: int = 3) -> bytes:
    """One record as /dev/kmsg gives it (facility 0, the kernel's; dev-kmsg ABI)."""
    return f"{priority},{seq},{seq * 1000},-;{message}\n".encode()


async def test_an_xid_line_is_reported_at_once_not_at_the_next_cycle(tmp_path: Path) -> None:
    server = _server(tmp_path)
    server.start(timeout_s=30)
    runner: Runner | None = None
    task: asyncio.Task[None] | None = None
    admin = await natsconn.connect(server.client(ADMIN), name="test-admin")
    try:
        await _topology(server)
        kmsg = tmp_path / "root" / "dev" / "kmsg"
        kmsg.parent.mkdir(parents=True)
        os.mkfifo(kmsg)
        config = load_config(_config(tmp_path, server, cadence_s="60"))
        health: list[dict[str, int]] = []
        subject = NS.wire(f"telemetry.observed.health.{SITE}.{NODE}")

        async def on_health(msg: object) -> None:
            health.append(json.loads(msg.data)["data"]["xid_counts"])  # type: ignore[attr-defined]

        # An ordered consumer on the TELEMETRY stream (the administrator may create one).
        await admin.jetstream().subscribe(subject, cb=on_health, ordered_consumer=True)
        runner = Runner(config)
        task = asyncio.create_task(runner.run())

        async def reports(n: int) -> bool:
            return len(health) >= n

        await until(lambda: reports(1), what="the first cycle's report", timeout_s=30)
        writer = os.open(kmsg, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(writer, _record(1, "mlx5_core 0000:ab:00.0: Port: 1 Link ACTIVE", 6))
            xid = _record(2, XID_79)
            os.write(writer, xid[:20])
            await asyncio.sleep(0.2)  # a line split across writes is read whole, once
            os.write(writer, xid[20:])
            written = time.monotonic()
            await until(lambda: reports(2), what="the XID's report", timeout_s=10)
            seconds = time.monotonic() - written
        finally:
            os.close(writer)
    finally:
        if runner is not None and task is not None:
            runner.stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
        await admin.close()
        server.stop()
    assert seconds < 5, f"reported {seconds:.1f}s after the line, the cadence is 60 s"
    assert health[:2] == [{}, {"79": 1}]  # counted once, in the report it woke
