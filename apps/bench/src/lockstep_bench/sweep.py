"""``lockstep bench sweep``: a whole-fleet Redfish inventory sweep against the simulator, timed
against a raw aiohttp client making the same requests in the same run.

Setup: a ``Simulator`` of ``nodes`` BMCs (each on its own loopback address, ``latency_ms``
added to every request) runs in a child process, so the server and the client each get a core
(perf.md section 5; the build machine has two). Each run then times, in this process:

- **baseline** (``raw_sweep``): the same requests per BMC fired with minimal client logic:
  session ``POST``, ServiceRoot ``GET``, the ``FirmwareInventory`` GET(s), session
  ``DELETE``; ``json.loads`` of every body, no validation, no retries, no error handling
  beyond counting. Same concurrency budget and request graph as the sweeper: ``concurrency``
  BMCs between login and inventory, ``concurrency`` requests in flight (logouts aside),
  ``per_bmc`` requests per BMC, one short-lived connection pool per BMC, the logout outside
  the BMC bound. So the ratio measures the sweeper's own client-side cost:
  ``ratio = raw_seconds / seconds`` (1.0: as fast as the raw client; higher is better).
- **measured path** (``sweep_into``): ``lockstep_inventory.adapters.sweeper.sweep`` feeding a
  ``sink``, timed from the start of the sweep until the last ``await sink(chunk)`` returned.

Both run under the same garbage-collector settings: ``sweeper.sweep_gc`` (what a sweeping
process should use) unless ``gc_tuned=False``.

With ``database_url`` (what ``lockstep bench sweep`` does unless ``--no-commit``), the measured
path is the inventory service's own: ``lockstep_inventory.sweeping.run_sweep`` over a registry
of the simulated BMCs, timed until the last chunk with its drift events is committed
(``sweep_db``). Without it, the sweep feeds a :data:`Sink` (an awaitable callable taking
one chunk of up to ``chunk`` results; the sweep waits while it runs), by default a
:class:`CountingSink` that only counts.

The server child is started with multiprocessing's ``spawn``: a script calling ``run_bench``
needs the usual ``if __name__ == "__main__":`` guard (console scripts and ``python -c`` are
fine).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any

import aiohttp

from lockstep_common.open_files import raise_fd_limit
from lockstep_inventory.adapters.sweeper import (
    DEFAULT_OPTIONS,
    SweepOptions,
    SweepResult,
    sweep,
    sweep_gc,
)
from lockstep_redfish.credentials import CredentialSource
from lockstep_redfish.session import BmcTarget
from lockstep_sim.bench import FD_HEADROOM
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.simulator import Simulator

HOST_BASE = "127.79.0.1"
READY_TIMEOUT_S = 300.0
ROOT = "/redfish/v1/"
SESSIONS = "/redfish/v1/SessionService/Sessions"
FIRMWARE = "/redfish/v1/UpdateService/FirmwareInventory"
EXPAND = "?$expand=.($levels=1)"
HEADERS = {"Accept": "application/json", "OData-Version": "4.0"}

Sink = Callable[[list[SweepResult]], Awaitable[None]]
"""Takes one chunk of results; the sweep waits while it runs (e.g. a database commit)."""


@dataclass(slots=True)
class CountingSink:
    """The default sink: counts results, unreadable BMCs, failed logouts and members."""

    results: int = 0
    unreadable: int = 0
    logout_errors: int = 0
    expanded: int = 0
    members: int = 0
    first_error: str | None = None

    async def __call__(self, chunk: list[SweepResult]) -> None:
        for result in chunk:
            self.results += 1
            self.members += len(result.members)
            self.expanded += result.expanded
            if not result.readable:
                self.unreadable += 1
                self.first_error = self.first_error or result.error
            if result.logout_error is not None:
                self.logout_errors += 1
                self.first_error = self.first_error or result.logout_error


class _Credentials:
    """The simulator's credentials for every BMC."""

    def get(self, node_id: str) -> tuple[str, str]:
        return DEFAULT_USERNAME, DEFAULT_PASSWORD


async def sweep_into(
    targets: Sequence[BmcTarget],
    sink: Sink,
    credentials: CredentialSource,
    options: SweepOptions,
    *,
    chunk: int = 256,
) -> None:
    """The measured path: ``sweep(targets, ...)`` feeding ``sink`` in chunks of up to
    ``chunk`` results; returns once the last chunk has been applied."""
    batch: list[SweepResult] = []
    async with aclosing(sweep(targets, credentials=credentials, options=options)) as results:
        async for result in results:
            batch.append(result)
            if len(batch) >= chunk:
                await sink(batch)
                batch = []
    if batch:
        await sink(batch)


@dataclass(slots=True)
class RawTally:
    """What the raw baseline saw."""

    bmcs: int = 0
    requests: int = 0
    errors: int = 0


async def raw_sweep(
    urls: Sequence[str], *, concurrency: int, per_bmc: int, expand: bool
) -> RawTally:
    """The baseline: the sweeper's requests and concurrency, minimal client logic."""
    tally = RawTally()
    slots = asyncio.Semaphore(concurrency)  # requests in flight
    logouts = asyncio.Semaphore(2 * concurrency)  # as the sweeper: bounded by ``admitted``
    reading = asyncio.Semaphore(concurrency)  # BMCs between login and inventory
    admitted = asyncio.Semaphore(2 * concurrency)  # BMCs started, logout not yet done
    login = json.dumps({"UserName": DEFAULT_USERNAME, "Password": DEFAULT_PASSWORD}).encode()
    json_headers = {"Content-Type": "application/json"}

    async def call(
        http: aiohttp.ClientSession,
        method: str,
        url: str,
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
    ) -> tuple[int, Any, Any]:
        budget = logouts if method == "DELETE" else slots
        async with budget, http.request(method, url, headers=headers, data=data) as reply:
            raw = await reply.read()
            tally.requests += 1
            return reply.status, reply.headers, json.loads(raw) if raw else None

    async def visit(base: str) -> None:
        try:
            async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=per_bmc, limit_per_host=per_bmc),
                headers=HEADERS,
                timeout=aiohttp.ClientTimeout(),
            ) as http:
                try:
                    _, headers, _ = await call(http, "POST", base + SESSIONS, json_headers, login)
                    await call(http, "GET", base + ROOT)
                    auth = {"X-Auth-Token": headers["X-Auth-Token"]}
                    _, _, body = await call(http, "GET", base + FIRMWARE + (EXPAND * expand), auth)
                    if not expand:
                        per = asyncio.Semaphore(per_bmc)

                        async def member(path: str) -> None:
                            async with per:
                                await call(http, "GET", base + path, auth)

                        await asyncio.gather(*(member(m["@odata.id"]) for m in body["Members"]))
                finally:
                    reading.release()
                status, _, _ = await call(http, "DELETE", base + headers["Location"], auth)
                tally.errors += status != 200
                tally.bmcs += 1
        except Exception:  # noqa: BLE001 - counted; the figure is void when errors > 0
            tally.errors += 1
        finally:
            admitted.release()

    tasks = []
    for url in urls:
        await admitted.acquire()
        await reading.acquire()
        tasks.append(asyncio.create_task(visit(url)))
    await asyncio.gather(*tasks)
    return tally


# --- the simulator in a child process ------------------------------------------------------


def _server_main(
    conn: Connection, nodes: int, latency_ms: float, seed: int, connections: int
) -> None:
    """Child-process entry point: serve until the parent says "stop" (or goes away)."""
    raise_fd_limit(nodes + connections + FD_HEADROOM)  # a listening socket per BMC

    async def serve() -> None:
        sim = Simulator(
            SimOptions(
                nodes, "gb200", latency_ms=latency_ms, seed=seed, host_base=HOST_BASE, port=0
            )
        )
        await sim.start()
        try:
            conn.send([sim.bmc_url(node.id) for node in sim.fleet])
            loop = asyncio.get_running_loop()
            while await loop.run_in_executor(None, conn.recv) == "cpu":
                conn.send(time.process_time())
        finally:
            await sim.stop()

    with contextlib.suppress(EOFError, KeyboardInterrupt):
        asyncio.run(serve())


@dataclass(slots=True)
class _Run:
    seconds: float
    raw_seconds: float
    client_cpu: float  # CPU seconds per wall second of the measured sweep
    server_cpu: float
    raw_client_cpu: float
    errors: int
    raw_errors: int


@dataclass(slots=True)
class _Server:
    conn: Connection
    urls: list[str] = field(default_factory=list)

    def cpu(self) -> float:
        self.conn.send("cpu")
        return float(self.conn.recv())


def _timed(
    server: _Server, job: Callable[[], Coroutine[Any, Any, None]]
) -> tuple[float, float, float]:
    """(wall seconds, client CPU/s, server CPU/s) of ``asyncio.run(job())``."""
    server_cpu, client_cpu, started = server.cpu(), time.process_time(), time.perf_counter()
    asyncio.run(job())
    wall = time.perf_counter() - started
    client = (time.process_time() - client_cpu) / wall
    return wall, client, (server.cpu() - server_cpu) / wall


def _one_run(
    server: _Server,
    *,
    raw_first: bool,
    chunk: int,
    sink: Sink,
    options: SweepOptions,
    database_url: str | None = None,
    drifted_share: float = 0.01,
) -> tuple[_Run, CountingSink | None]:
    urls = server.urls
    expand = options.use_expand is not False  # run_bench sets None (expand) or False
    # The bench's simulated BMCs serve plain http (lockstep_sim): allowed for them only.
    targets = [BmcTarget(f"node-{i:05d}", url, allow_plain_http=True) for i, url in enumerate(urls)]
    tally = RawTally()
    db_run = None
    committed = (0, 0)
    if database_url is not None:
        from lockstep_bench import sweep_db

        db_run = asyncio.run(sweep_db.prepare(database_url, targets, drifted_share))

    async def raw() -> None:
        nonlocal tally
        tally = await raw_sweep(
            urls, concurrency=options.concurrency, per_bmc=options.per_bmc, expand=expand
        )

    async def ours() -> None:
        nonlocal committed
        if db_run is not None:
            committed = await sweep_db.commit_sweep(db_run, _Credentials(), options, chunk=chunk)
            return
        await sweep_into(targets, sink, _Credentials(), options, chunk=chunk)

    try:
        if raw_first:
            raw_s, raw_cpu, _ = _timed(server, raw)
        ours_s, ours_cpu, server_cpu = _timed(server, ours)
        if not raw_first:
            raw_s, raw_cpu, _ = _timed(server, raw)
    finally:
        if db_run is not None:  # a failed run leaves no schema behind
            asyncio.run(sweep_db.drop(db_run))
    counted = sink if isinstance(sink, CountingSink) and db_run is None else None
    errors = 0
    if db_run is not None:
        # Every BMC read and committed, exactly one drift.detected per drifted node.
        errors = abs(len(urls) - committed[0]) + abs(len(db_run.drifted) - committed[1])
    elif counted is not None:
        missing = len(urls) - counted.results
        wrong_mode = counted.results - counted.expanded if expand else counted.expanded
        errors = counted.unreadable + counted.logout_errors + missing + wrong_mode
    run = _Run(ours_s, raw_s, ours_cpu, server_cpu, raw_cpu, errors, tally.errors)
    return run, counted


def _runs(
    server: _Server,
    runs: int,
    sink_factory: Callable[[], Sink] | None,
    **kwargs: Any,
) -> tuple[list[_Run], int]:
    done: list[_Run] = []
    members = 0
    for i in range(runs):
        sink = sink_factory() if sink_factory is not None else CountingSink()
        # Alternate which goes first: the simulator's state (ledgers) grows run by run.
        run, counted = _one_run(server, raw_first=i % 2 == 0, sink=sink, **kwargs)
        done.append(run)
        if counted is not None and counted.results:
            members = counted.members // counted.results
    return done, members


def run_bench(
    nodes: int = 12_500,
    latency_ms: float = 200.0,
    *,
    expand: bool = True,
    runs: int = 3,
    concurrency: int = 1024,
    per_bmc: int = 2,
    chunk: int = 256,
    seed: int = 0,
    gc_tuned: bool = True,
    sink_factory: Callable[[], Sink] | None = None,
    database_url: str | None = None,
    drifted_share: float = 0.01,
    sweep_options: SweepOptions = DEFAULT_OPTIONS,
) -> dict[str, Any]:
    """Time ``runs`` full sweeps and as many raw baselines (paired per run, in alternating
    order, against the same server).

    ``sweep_options`` holds the measured sweep's other knobs (timeouts, retries, TLS); its
    ``concurrency``, ``per_bmc`` and ``use_expand`` are replaced by the arguments above,
    which the raw baseline uses too.

    With ``database_url``, the measured path is the service's (``sweep_db``): every
    result committed with its state, history and drift events, and ``errors`` also counts a
    wrong number of results or of ``drift.detected`` events.

    Returns ``seconds`` (median of the measured sweeps), ``raw_seconds`` (= ``baseline``,
    median of the raw baselines), ``ratio`` (median of the per-run raw / measured ratios;
    goal >= 0.7), ``bmcs_per_s`` (``nodes / seconds``), ``nodes``, ``latency_ms``, ``expand``,
    ``runs``, ``concurrency``, ``per_bmc``, ``gc_tuned``, ``committed``, ``errors`` (results
    missing, and with a database a wrong number of drift events; with the counting sink also
    unreadable BMCs, failed logouts and results in the wrong mode; over all runs: the figures
    are void unless 0),
    ``raw_errors``, ``client_cpu`` / ``server_cpu`` / ``raw_client_cpu`` (medians, CPU
    seconds per wall second: near 1.0 means that side is the bottleneck), ``members`` per
    BMC, and the per-run lists ``seconds_runs``, ``raw_seconds_runs``, ``ratio_runs``.
    """
    if min(nodes, runs, concurrency, per_bmc, chunk) < 1:
        raise ValueError("nodes, runs, concurrency, per_bmc and chunk must be >= 1")
    # At most 2 * concurrency BMCs are started and not yet delivered, each with up to per_bmc
    # connections: the client's sockets and as many accepted on the server's side.
    connections = 2 * concurrency * per_bmc
    raise_fd_limit(connections + FD_HEADROOM)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(
        target=_server_main,
        args=(child, nodes, latency_ms, seed, connections),
        daemon=True,
    )
    proc.start()
    try:
        if not parent.poll(READY_TIMEOUT_S):
            raise RuntimeError(f"simulator did not start in {READY_TIMEOUT_S}s")
        server = _Server(parent, parent.recv())
        gc_settings = sweep_gc() if gc_tuned else contextlib.nullcontext()
        with gc_settings:
            done, members = _runs(
                server,
                runs,
                sink_factory,
                chunk=chunk,
                options=replace(
                    sweep_options,
                    concurrency=concurrency,
                    per_bmc=per_bmc,
                    use_expand=None if expand else False,
                ),
                database_url=database_url,
                drifted_share=drifted_share,
            )
        parent.send("stop")
    finally:
        parent.close()  # a child still waiting sees EOF and exits
        proc.join(timeout=30)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)

    seconds = statistics.median(r.seconds for r in done)
    raw_seconds = statistics.median(r.raw_seconds for r in done)
    ratios = [r.raw_seconds / r.seconds for r in done]
    return {
        "seconds": round(seconds, 3),
        "raw_seconds": round(raw_seconds, 3),
        "baseline": round(raw_seconds, 3),
        "ratio": round(statistics.median(ratios), 3),
        "bmcs_per_s": round(nodes / seconds, 1),
        "nodes": nodes,
        "latency_ms": latency_ms,
        "expand": expand,
        "runs": runs,
        "concurrency": concurrency,
        "per_bmc": per_bmc,
        "gc_tuned": gc_tuned,
        "committed": database_url is not None,
        "members": members,
        "errors": sum(r.errors for r in done),
        "raw_errors": sum(r.raw_errors for r in done),
        "client_cpu": round(statistics.median(r.client_cpu for r in done), 2),
        "server_cpu": round(statistics.median(r.server_cpu for r in done), 2),
        "raw_client_cpu": round(statistics.median(r.raw_client_cpu for r in done), 2),
        "seconds_runs": [round(r.seconds, 3) for r in done],
        "raw_seconds_runs": [round(r.raw_seconds, 3) for r in done],
        "ratio_runs": [round(x, 3) for x in ratios],
    }
