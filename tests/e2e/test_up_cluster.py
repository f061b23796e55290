"""``lockstep up --nats-cluster 3`` as a user runs it: three nats-servers from the same wheel,
R3 streams and consumers, two processes each of the updater and the healthgate, and every
client given the three URLs; Ctrl-C stops all of it."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from lockstep_common.natsconn import NatsAccess, connect
from lockstep_common.topology import EVENT_STREAMS
from tests.e2e.test_up import Up, access, alive, data_dir, descendants

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
__all__ = ["data_dir"]  # the fixture, shared with test_up


def processes(root: int, argument: str) -> set[int]:
    """Live processes below ``root`` with ``argument`` among their arguments."""
    found = set()
    for pid in descendants(root):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        named = any(a == argument.encode() or a.endswith(b"/" + argument.encode()) for a in args)
        if named and alive(pid):
            found.add(pid)
    return found


async def replication(admin: NatsAccess) -> dict[str, tuple[int, int]]:
    """Per stream and consumer: (declared replicas, servers holding it)."""
    nc = await connect(admin, name="e2e")
    out: dict[str, tuple[int, int]] = {}
    try:
        js = nc.jetstream()
        for spec in EVENT_STREAMS:
            name = f"LOCKSTEP_{spec.base}"
            info = await js.stream_info(name)
            assert info.cluster is not None and info.cluster.leader, name
            out[name] = (info.config.num_replicas or 0, 1 + len(info.cluster.replicas or []))
        for consumer in await js.consumers_info("LOCKSTEP_ROLLOUTS"):
            assert consumer.cluster is not None and consumer.cluster.leader
            out[str(consumer.name)] = (3, 1 + len(consumer.cluster.replicas or []))
    finally:
        await nc.close()
    return out


def test_up_with_a_nats_cluster_runs_three_servers_r3_streams_and_two_of_each_worker(
    data_dir: Path,
) -> None:
    up = Up(data_dir, "--nats-cluster", "3")
    text = up.wait_until_up(timeout_s=240)
    try:
        tree = descendants(up.proc.pid)
        assert len(processes(up.proc.pid, "nats-server")) == 3, text
        for name, count in (
            ("updater", 2),
            ("healthgate", 2),
            ("planner", 1),
            ("inventory", 1),
            ("attest", 1),
        ):
            assert len(processes(up.proc.pid, f"lockstep_{name}")) == count, (name, text)
        for label in ("updater", "updater-2", "healthgate", "healthgate-2"):
            assert re.search(rf"│ {label}\s.*http://127\.0\.0\.1:\d+/metrics", text), text
            assert (data_dir / "logs" / f"{label}.log").exists()
        state = json.loads((data_dir / "stack.json").read_text())
        urls = state["nats_url"].split(",")
        assert len(set(urls)) == 3 and all(u.startswith("tls://127.0.0.1:") for u in urls)
        admin = access(data_dir, "admin")
        assert list(admin.servers) == urls  # `lockstep env` gives every client all three
        for name, (declared, held) in asyncio.run(replication(admin)).items():
            assert (declared, held) == (3, 3), name
    finally:
        assert up.interrupt() == 0, "".join(up.output)
    leftovers = {pid for pid in tree if alive(pid)}
    assert not leftovers, f"processes left behind: {leftovers}"
