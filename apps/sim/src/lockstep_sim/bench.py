"""How many Redfish GETs one simulator process serves, against the ceiling of its HTTP stack.

``run_bench`` starts a ``Simulator`` of ``nodes`` BMCs in a child process (one core for the
server, one for the client) and drives it from this process with aiohttp: ``concurrency``
workers each take the next BMC, GET ``per_visit`` of its FirmwareInventory members over one
keep-alive connection with Basic auth, and send ``Connection: close`` on the last GET, so the
client never holds more than ``concurrency`` sockets while the server already holds one
listening socket per BMC. Visits go round the whole fleet, so every BMC is hit when
``requests >= nodes``.

The baseline is a plain aiohttp app on the same kind of sockets (one per BMC address, one
port) returning a static JSON body as large as the simulator's answers, after the same
``latency_ms`` sleep: the ratio is the share of the server stack's ceiling the emulator keeps.

The server child is started with multiprocessing's ``spawn``: a script calling ``run_bench``
needs the usual ``if __name__ == "__main__":`` guard (console scripts and ``python -c`` are
fine).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import multiprocessing
import resource
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from lockstep_common.open_files import HEADROOM, raise_fd_limit
from lockstep_sim.fleet import build_fleet
from lockstep_sim.inventory import FIRMWARE
from lockstep_sim.listening import bind_all, serve_on
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.simulator import Simulator

HOST_BASE = "127.77.0.1"
READY_TIMEOUT_S = 300.0
FD_HEADROOM = HEADROOM


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What a started server reports."""

    port: int
    startup_s: float
    rss_mb: float


@dataclass(frozen=True, slots=True)
class Visit:
    """The GETs one worker makes to one BMC over one connection."""

    address: str
    paths: tuple[str, ...]


def rss_mb() -> float:
    """Resident set size of this process now, in MiB (Linux ``/proc``; peak elsewhere)."""
    with contextlib.suppress(OSError), Path("/proc/self/status").open(encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class BaselineServer:
    """A plain aiohttp app answering every GET with one static JSON body, on one socket per
    address (the same layout as the ``Simulator``)."""

    def __init__(self, addresses: list[str], body_bytes: int, latency_ms: float) -> None:
        filler = max(0, body_bytes - len(json.dumps({"pad": ""})))
        self.body = json.dumps({"pad": "x" * filler}).encode()
        self.addresses = addresses
        self.latency_s = latency_ms / 1000
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        return web.Response(body=self.body, content_type="application/json")

    async def start(self) -> None:
        """Bind every address and serve."""
        socks, self.port = bind_all(self.addresses, 0)
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._handle)
        self._runner = await serve_on(app, socks)

    async def stop(self) -> None:
        """Close every socket."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def _make_server(
    kind: str, nodes: int, profile: str, seed: int, latency_ms: float, body_bytes: int
) -> Simulator | BaselineServer:
    if kind == "sim":
        return Simulator(
            SimOptions(
                nodes, profile, latency_ms=latency_ms, seed=seed, host_base=HOST_BASE, port=0
            )
        )
    addresses = [n.address for n in build_fleet(nodes, profile, seed, HOST_BASE)]
    return BaselineServer(addresses, body_bytes, latency_ms)


async def _serve(
    conn: Connection,
    kind: str,
    nodes: int,
    profile: str,
    seed: int,
    latency_ms: float,
    body_bytes: int,
) -> None:
    started = time.perf_counter()
    server = _make_server(kind, nodes, profile, seed, latency_ms, body_bytes)
    await server.start()
    conn.send(ServerInfo(server.port, time.perf_counter() - started, rss_mb()))
    loop = asyncio.get_running_loop()
    try:
        while await loop.run_in_executor(None, conn.recv) == "cpu":
            conn.send(time.process_time())
        conn.send(rss_mb())
    finally:
        await server.stop()


def _server_main(
    conn: Connection,
    kind: str,
    nodes: int,
    profile: str,
    seed: int,
    latency_ms: float,
    body_bytes: int,
) -> None:
    """Child-process entry point: serve until the parent sends anything (or goes away)."""
    raise_fd_limit(nodes + FD_HEADROOM)
    with contextlib.suppress(EOFError, KeyboardInterrupt):
        asyncio.run(_serve(conn, kind, nodes, profile, seed, latency_ms, body_bytes))


def plan_visits(nodes: int, profile: str, seed: int, requests: int) -> list[Visit]:
    """Round-robin visits over the fleet, ``requests // nodes`` GETs each (at least 1, at
    most one per member), until ``requests`` GETs are planned."""
    fleet = build_fleet(nodes, profile, seed, HOST_BASE)
    per_visit = max(1, requests // nodes)
    visits: list[Visit] = []
    planned = 0
    for node in itertools.cycle(fleet):
        if planned >= requests:
            break
        members = list(node.components)
        count = min(per_visit, len(members), requests - planned)
        visits.append(Visit(node.address, tuple(f"{FIRMWARE}/{m}" for m in members[:count])))
        planned += count
    return visits


@dataclass(slots=True)
class _Tally:
    ok: int = 0
    errors: int = 0
    body_bytes: int = 0


async def _worker(
    http: aiohttp.ClientSession, port: int, visits: Iterator[Visit], tally: _Tally
) -> None:
    close = {"Connection": "close"}
    for visit in visits:
        last = len(visit.paths) - 1
        for i, path in enumerate(visit.paths):
            url = f"http://{visit.address}:{port}{path}"
            try:
                async with http.get(url, headers=close if i == last else None) as reply:
                    body = await reply.read()
                    if reply.status == 200:
                        tally.ok += 1
                        tally.body_bytes = len(body)
                    else:
                        tally.errors += 1
            except (aiohttp.ClientError, OSError):
                tally.errors += 1


async def drive(port: int, plan: list[Visit], concurrency: int) -> tuple[float, _Tally]:
    """Make the planned GETs with ``concurrency`` workers; return (GETs/s, tally)."""
    token = base64.b64encode(f"{DEFAULT_USERNAME}:{DEFAULT_PASSWORD}".encode()).decode()
    visits = iter(plan)
    tally = _Tally()
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(
        connector=connector, headers={"Authorization": f"Basic {token}"}, timeout=timeout
    ) as http:
        started = time.perf_counter()
        await asyncio.gather(*(_worker(http, port, visits, tally) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return (tally.ok / elapsed if elapsed > 0 else 0.0), tally


@dataclass(slots=True)
class _Series:
    rates: list[float]
    info: ServerInfo
    rss_after_mb: float
    body_bytes: int
    errors: int
    busy: list[tuple[float, float]]
    """(server, client) CPU seconds per wall second of each run."""


def _cpu(conn: Connection) -> float:
    """The server process's CPU seconds so far."""
    conn.send("cpu")
    return float(conn.recv())


def _series_remote(
    kind: str,
    nodes: int,
    profile: str,
    seed: int,
    latency_ms: float,
    body_bytes: int,
    plan: list[Visit],
    concurrency: int,
    runs: int,
) -> _Series:
    """Serve from a child process, drive from this one."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(
        target=_server_main,
        args=(child, kind, nodes, profile, seed, latency_ms, body_bytes),
        daemon=True,
    )
    proc.start()
    try:
        if not parent.poll(READY_TIMEOUT_S):
            raise RuntimeError(f"{kind} server did not start in {READY_TIMEOUT_S}s")
        info: ServerInfo = parent.recv()
        rates, size, errors, busy = [], 0, 0, []
        for _ in range(runs):
            server_cpu, client_cpu, wall = _cpu(parent), time.process_time(), time.perf_counter()
            rate, tally = asyncio.run(drive(info.port, plan, concurrency))
            wall = time.perf_counter() - wall
            busy.append(
                ((_cpu(parent) - server_cpu) / wall, (time.process_time() - client_cpu) / wall)
            )
            rates.append(rate)
            size, errors = tally.body_bytes or size, errors + tally.errors
        parent.send("stop")
        rss_after = float(parent.recv()) if parent.poll(30) else info.rss_mb
        return _Series(rates, info, rss_after, size, errors, busy)
    finally:
        parent.close()  # a child still waiting for "stop" sees EOF and exits
        proc.join(timeout=30)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)


async def _series_local(
    kind: str,
    nodes: int,
    profile: str,
    seed: int,
    latency_ms: float,
    body_bytes: int,
    plan: list[Visit],
    concurrency: int,
    runs: int,
) -> _Series:
    """Serve and drive in this process and event loop (one core for both)."""
    started = time.perf_counter()
    server = _make_server(kind, nodes, profile, seed, latency_ms, body_bytes)
    await server.start()
    info = ServerInfo(server.port, time.perf_counter() - started, rss_mb())
    try:
        rates, size, errors, busy = [], 0, 0, []
        for _ in range(runs):
            cpu, wall = time.process_time(), time.perf_counter()
            rate, tally = await drive(info.port, plan, concurrency)
            busy.append(((time.process_time() - cpu) / (time.perf_counter() - wall), 0.0))
            rates.append(rate)
            size, errors = tally.body_bytes or size, errors + tally.errors
        return _Series(rates, info, rss_mb(), size, errors, busy)
    finally:
        await server.stop()


def run_bench(
    nodes: int = 12500,
    latency_ms: float = 0.0,
    requests: int = 50_000,
    concurrency: int = 256,
    runs: int = 3,
    *,
    separate_process: bool = True,
    profile: str = "gb200",
    seed: int = 0,
) -> dict[str, Any]:
    """Benchmark the simulator against a plain-aiohttp baseline; figures are medians over runs.

    Args:
        nodes: BMCs the simulator serves (one listening socket each).
        latency_ms: latency added to every request (simulator and baseline alike).
        requests: GETs per run.
        concurrency: client workers, hence the most client sockets open at once.
        runs: runs per server; the medians are reported.
        separate_process: serve from a child process (True) or from this event loop.
        profile: fleet profile (``gb200``: 30 FirmwareInventory members per BMC).
        seed: fleet seed.

    Returns:
        ``gets_per_s``, ``baseline_per_s``, ``ratio`` (gets / baseline), ``nodes``,
        ``latency_ms``, ``startup_s`` (fleet build + bind + serve), ``rss_mb`` (server
        process after the runs; with ``separate_process=False`` it includes the client), plus
        ``requests``, ``concurrency``, ``runs``, ``separate_process``, ``body_bytes``,
        ``errors``, the per-run rates ``gets_per_s_runs`` / ``baseline_per_s_runs``, and
        ``server_cpu`` / ``client_cpu`` / ``baseline_server_cpu``: CPU seconds per wall
        second during the runs (near 1.0 means that side is the bottleneck; in-process
        runs report the one shared process as the server and 0 for the client).
    """
    if min(nodes, requests, concurrency, runs) < 1:
        raise ValueError("nodes, requests, concurrency and runs must be >= 1")
    raise_fd_limit((0 if separate_process else nodes) + 2 * concurrency + FD_HEADROOM)

    plan = plan_visits(nodes, profile, seed, requests)

    def series(kind: str, body_bytes: int) -> _Series:
        args = (kind, nodes, profile, seed, latency_ms, body_bytes, plan, concurrency, runs)
        if separate_process:
            return _series_remote(*args)
        return asyncio.run(_series_local(*args))

    sim = series("sim", 0)
    base = series("baseline", sim.body_bytes)
    gets, baseline = statistics.median(sim.rates), statistics.median(base.rates)
    return {
        "gets_per_s": round(gets, 1),
        "baseline_per_s": round(baseline, 1),
        "ratio": round(gets / baseline, 3) if baseline > 0 else float("nan"),
        "nodes": nodes,
        "latency_ms": latency_ms,
        "startup_s": round(sim.info.startup_s, 3),
        "rss_mb": round(sim.rss_after_mb, 1),
        "requests": requests,
        "concurrency": concurrency,
        "runs": runs,
        "separate_process": separate_process,
        "body_bytes": sim.body_bytes,
        "errors": sim.errors + base.errors,
        "server_cpu": round(statistics.median(b[0] for b in sim.busy), 2),
        "client_cpu": round(statistics.median(b[1] for b in sim.busy), 2),
        "baseline_server_cpu": round(statistics.median(b[0] for b in base.busy), 2),
        "gets_per_s_runs": [round(r, 1) for r in sim.rates],
        "baseline_per_s_runs": [round(r, 1) for r in base.rates],
    }
