"""``lockstep bench agent``: what one node agent costs its node, per report cycle.

One agent process runs its real cycle (``lockstep_agent``: every probe, both events, the disk
spool, the sender) ``cycles`` times on a node of 8 GPUs: a fake root with the files a GPU node
has (driver, module, firmware directories, CUDA, NCCL, 8 RDMA devices, a kernel log with XID
lines) and a stand-in for NVML answering for 8 GPUs, since this machine may have none. The
sender publishes to a JetStream stand-in that acknowledges at once, so the figure is the
agent's own CPU, not the network's. Measured in a child process, so its RSS is the agent's:

- CPU seconds per cycle (``time.process_time``: user + system), median and p99, and what that
  is of one core at a 10 s cadence (goal: <= 1 %);
- the process's peak RSS after the cycles (goal: <= 60 MB), against the same interpreter's RSS
  with the agent's modules imported and nothing run, measured in the same child first.

Not measured here: a real NVML's own cost (its calls go to the driver), and XID line ->
``gate.tripped`` latency on a running stack.
"""

from __future__ import annotations

import asyncio
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

GPUS = 8
CADENCE_S = 10.0
GOAL_CPU_PERCENT = 1.0
GOAL_RSS_MB = 60.0


def fake_nvml(gpus: int = GPUS) -> Any:
    """``pynvml`` with its constants and errors, its calls answering for ``gpus`` H100s."""
    import pynvml

    n = types.SimpleNamespace(**{k: getattr(pynvml, k) for k in dir(pynvml) if k[0] != "_"})
    links = 18  # NVLink 4 on an H100 SXM

    def nvlink(_h: int, link: int, _counter: int) -> int:
        if link >= links:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 0

    answers: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlSystemGetDriverVersion": lambda: "580.65.06",
        "nvmlSystemGetCudaDriverVersion": lambda: 13000,
        "nvmlDeviceGetCount": lambda: gpus,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda h: f"GPU-00000000-0000-0000-0000-{h:012d}",
        "nvmlDeviceGetVbiosVersion": lambda h: "96.00.99.00.01",
        "nvmlDeviceGetGspFirmwareVersion": lambda h: "580.65.06",
        "nvmlDeviceGetGspFirmwareMode": lambda h: (1, 1),
        "nvmlDeviceGetInforomImageVersion": lambda h: "G520.0200.00.05",
        "nvmlDeviceGetClockInfo": lambda h, c: 1980,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0,
        "nvmlDeviceGetTemperature": lambda h, s: 61 + h,
        "nvmlDeviceGetPowerUsage": lambda h: 650_000,
        "nvmlDeviceGetTotalEccErrors": lambda h, t, c: 0,
        "nvmlDeviceGetRemappedRows": lambda h: (0, 0, 0, 0),
        "nvmlDeviceGetPcieReplayCounter": lambda h: 0,
        "nvmlDeviceGetNvLinkErrorCounter": nvlink,
    }
    for name, call in answers.items():
        setattr(n, name, call)
    return n


def fake_root(root: Path, gpus: int = GPUS) -> Path:
    """The files of a GPU node with ``gpus`` GPUs and as many RDMA devices."""
    files = {
        "sys/module/nvidia/version": "580.65.06\n",
        "proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64"
        "  580.65.06  Release Build  (dvs-builder@U22-I3-AE18-23-3)  Tue Jul 22 19:19:41 UTC "
        "2025\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n",
        "proc/sys/kernel/osrelease": "6.8.0-45-generic\n",
        "proc/sys/kernel/random/boot_id": "2ac7e67e-bcbb-4903-8b2f-937cedd6d671\n",
        "usr/local/cuda/version.json": '{"cuda": {"name": "CUDA SDK", "version": "13.0.0"}}',
        "usr/lib/x86_64-linux-gnu/libnccl.so.2.27.7": "",
        "dev/kmsg": "".join(
            f"6,{i},{i * 1000},-;NVRM: Xid (PCI:0000:1b:00): 13, pid=1, Graphics SM Warp\n"
            if i % 50 == 0
            else f"6,{i},{i * 1000},-;mlx5_core 0000:ab:00.0: Port: 1 Link ACTIVE\n"
            for i in range(1, 2001)
        ),
    }
    files |= {f"sys/class/infiniband/mlx5_{i}/fw_ver": "28.41.1000\n" for i in range(gpus)}
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for version in ("570.133.20", "580.65.06"):
        (root / "lib/firmware/nvidia" / version).mkdir(parents=True, exist_ok=True)
    return root


class _AckingJetStream:
    """Acknowledges every publish at once (the agent's CPU, not the network's)."""

    def __init__(self) -> None:
        self.published = 0

    async def publish_async(self, subject: str, payload: bytes, headers: dict[str, str]) -> Any:
        from nats.js.api import PubAck

        self.published += 1
        fut: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        fut.set_result(PubAck(stream="TELEMETRY", seq=self.published))
        return fut


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


async def _child(cycles: int, work: Path) -> dict[str, Any]:
    from lockstep_agent.agent import NodeAgent, ProbedReading
    from lockstep_agent.probes.node import probe_node
    from lockstep_agent.probes.xid import Cursor
    from lockstep_agent.reports import Counters
    from lockstep_agent.sender import Sender, drain
    from lockstep_agent.spool import Spool
    from lockstep_common.subjects import Namespace

    imported_rss = _rss_mb()
    root, nvml, counters = fake_root(work / "root"), fake_nvml(), Counters()

    last: list[ProbedReading] = []

    def read(cursor: Cursor | None) -> ProbedReading:
        last[:] = [ProbedReading(probe_node(root, cursor, nvml), counters)]
        return last[0]

    spool = Spool(work / "spool.sqlite", 8640)
    agent = NodeAgent("gpu-0001", "site-a", Namespace("bench"), read, spool)
    sender, js = Sender(), _AckingJetStream()
    cpu: list[float] = []
    gpus = 0
    for _ in range(cycles):
        started = time.process_time()
        agent.cycle()
        await drain(sender, spool, js, 256)  # type: ignore[arg-type]
        cpu.append(time.process_time() - started)
        gpus = len(last[0].facts.nvml.gpus)
    spool.close()
    return {
        "cycles": cycles,
        "gpus": gpus,
        "published": js.published,
        "cpu_s_per_cycle_median": statistics.median(cpu),
        "cpu_s_per_cycle_p99": sorted(cpu)[max(0, round(0.99 * len(cpu)) - 1)],
        "rss_mb": round(_rss_mb(), 1),
        "rss_imported_mb": round(imported_rss, 1),
    }


def run_bench(cycles: int) -> dict[str, Any]:
    """Run the agent's cycle ``cycles`` times in a child process; the figures and goals."""
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-agent-") as work:
        done = subprocess.run(
            [sys.executable, "-m", "lockstep_bench.agent", str(cycles), work],
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"bench agent child failed: {done.stderr.strip()[-500:]}")
    out: dict[str, Any] = json.loads(done.stdout)
    median = out["cpu_s_per_cycle_median"]
    out |= {
        "cadence_s": CADENCE_S,
        "cpu_percent_of_core": round(100.0 * median / CADENCE_S, 4),
        "goal_cpu_percent": GOAL_CPU_PERCENT,
        "goal_rss_mb": GOAL_RSS_MB,
    }
    return out


if __name__ == "__main__":
    result = asyncio.run(_child(int(sys.argv[1]), Path(sys.argv[2])))
    print(json.dumps(result))
