"""The ``lockstep`` command-line program."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from lockstep_cli.attest_cli import attest_app, bundle_app
from lockstep_cli.cli_io import choose_stack, fail, stdout_console
from lockstep_cli.dlq_cli import dlq_app
from lockstep_cli.fabric_cli import fabric_app
from lockstep_cli.fleet_cli import fleet_app
from lockstep_cli.gate_cli import bench_gate, gate_app
from lockstep_cli.node_cli import node_app
from lockstep_cli.rollout_cli import rollout_app
from lockstep_sim.cli import sim_app

app = typer.Typer(
    help="Lockstep: keep a GPU fleet's firmware and software in lockstep.",
    no_args_is_help=True,
    add_completion=False,
)
bench = typer.Typer(
    help="Benchmarks: figures and the ratio to a baseline measured in the same run.",
    no_args_is_help=True,
)
docs = typer.Typer(
    help="Generated documentation (JSON Schemas, AsyncAPI, event table).", no_args_is_help=True
)
app.add_typer(bench, name="bench")
app.add_typer(docs, name="docs")
app.add_typer(bundle_app, name="bundle")
app.add_typer(attest_app, name="attest")
app.add_typer(sim_app, name="sim")
app.add_typer(fleet_app, name="fleet")
app.add_typer(dlq_app, name="dlq")
app.add_typer(gate_app, name="gate")
app.add_typer(node_app, name="node")
app.add_typer(rollout_app, name="rollout")
app.add_typer(fabric_app, name="fabric")
bench.command("gate")(bench_gate)
console = stdout_console()


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import version

        print(f"lockstep {version('lockstep-cli')}")
        raise typer.Exit


@app.callback()
def lockstep(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Lockstep: keep a GPU fleet's firmware and software in lockstep."""
    # Every invocation starts from no --data-dir / -v: the fleet and dlq groups set their own
    # (one process may run several commands: tests, an embedding program).
    choose_stack(None, verbose=False)


DataDir = Annotated[
    Path, typer.Option("--data-dir", help="State of the embedded NATS and PostgreSQL.")
]


@app.command()
def up(
    data_dir: DataDir = Path(".data"),
    service: Annotated[
        list[str] | None,
        typer.Option("--service", "-s", help="Run only these services (repeatable)."),
    ] = None,
    nats_cluster: Annotated[
        int | None,
        typer.Option(
            "--nats-cluster",
            metavar="N",
            help="Run N nats-servers (odd, 3 or more) in one cluster on loopback: streams and "
            "consumers get three replicas, and the updater and healthgate run two processes "
            "each.",
        ),
    ] = None,
) -> None:
    """Start NATS, PostgreSQL and the services; Ctrl-C stops everything.

    A service that crashes is restarted with backoff (1 s doubling to 60 s); one that exits for
    its configuration (exit codes 2, 3) stays stopped. Uses LOCKSTEP_NATS_URL /
    LOCKSTEP_DATABASE_URL instead of the embedded servers when set.

    With --nats-cluster 3 the stack survives the loss of one nats-server: every client is
    given all three URLs and fails over, and every stream keeps a copy on each server.
    """
    from lockstep_cli import stack_state
    from lockstep_cli.cli_io import fail, settings_of
    from lockstep_cli.supervisor import (
        SERVICES,
        Interrupted,
        StackSettings,
        running_system,
        stop_signals_unwind,
        supervise,
    )
    from lockstep_common.db import redact_dsn
    from lockstep_devstack.nats_cluster import STREAM_REPLICAS, check_size

    names = service or list(SERVICES)
    unknown = sorted(set(names) - set(SERVICES))
    if unknown:
        raise typer.BadParameter(f"unknown service(s) {unknown}; choose from {list(SERVICES)}")
    if "LOCKSTEP_NATS_USER" in os.environ:
        fail(
            "LOCKSTEP_NATS_USER is set (from `lockstep env`?): lockstep up gives each service its "
            "own identity; run it where LOCKSTEP_NATS_* and LOCKSTEP_DATABASE_URL are not set"
        )
    # A bad LOCKSTEP_STREAM_* or other shared setting: one line now. Not from a state file:
    # up is what writes one.
    replicas = settings_of(StackSettings, find_stack=False).stream_replicas
    if nats_cluster is not None:
        try:
            check_size(nats_cluster)
        except ValueError as exc:
            fail(str(exc))
        if "LOCKSTEP_NATS_URL" in os.environ:
            fail(
                "--nats-cluster starts embedded nats-servers, but LOCKSTEP_NATS_URL names an "
                "external NATS: unset it, or drop --nats-cluster"
            )
        if "LOCKSTEP_STREAM_REPLICAS" in os.environ and replicas != STREAM_REPLICAS:
            fail(
                f"LOCKSTEP_STREAM_REPLICAS={replicas}: a --nats-cluster stack keeps "
                f"{STREAM_REPLICAS} replicas of every stream; unset it"
            )
    elif replicas > 1 and "LOCKSTEP_NATS_URL" not in os.environ:
        fail(
            f"LOCKSTEP_STREAM_REPLICAS={replicas} needs a NATS cluster: add --nats-cluster 3, "
            "or unset it"
        )
    usable_data_dir(data_dir)  # after the settings: nothing is made for a refused start

    def report(line: str) -> None:
        console.print(line, highlight=False)

    with (
        stack_state.exclusive(data_dir),
        stop_signals_unwind(),
        start_refusals_are_one_line(),
    ):
        try:
            with running_system(
                data_dir.resolve(), names, report=report, nats_cluster=nats_cluster or 1
            ) as (stack, services):
                # Before the table: whoever sees "is up" may run `lockstep env` at once.
                stack_state.save(
                    data_dir,
                    stack_state.StackState(
                        os.getpid(),
                        str(stack.nats_url),
                        str(stack.database_url),
                        tuple(stack.access or ()),
                        stack.access is not None and stack.nats is not None,
                    ),
                )
                table = Table(title="Lockstep is up (Ctrl-C to stop)")
                table.add_column("part")
                table.add_column("where")
                table.add_row("NATS", str(stack.nats_url).replace(",", "\n"))
                # The admin's DSN names its password file, not the password: `lockstep env`
                # gives it to operators' commands (`lockstep fleet`, `lockstep dlq`).
                table.add_row("PostgreSQL (admin)", redact_dsn(str(stack.database_url)))
                for svc in services:
                    table.add_row(svc.label, f"{svc.metrics_url}  (log {svc.log_path})")
                console.print(table)
                console.print(
                    f'other commands: [bold]eval "$(lockstep env --data-dir {data_dir})"[/]'
                )
                # Until Ctrl-C/SIGTERM: a crashed service is restarted with backoff; the stack
                # stops by itself only when no service is left that a restart could help.
                supervise(stack, services, report)
                console.print("[red]no service left running; stopping everything[/]")
                raise typer.Exit(1)
        except (KeyboardInterrupt, Interrupted):
            console.print("stopping ...")
        finally:
            stack_state.remove(data_dir)
    console.print("stopped.")


topology_app = typer.Typer(help="JetStream streams and consumers.", no_args_is_help=True)
app.add_typer(topology_app, name="topology")


@topology_app.command("apply")
def topology_apply(
    service: Annotated[
        list[str] | None,
        typer.Option("--service", "-s", help="Only these services' consumers (repeatable)."),
    ] = None,
) -> None:
    """Create the streams and every service's consumers, as the admin identity.

    Services may only read their streams and consumers; `lockstep up` provisions them itself,
    an external deployment runs this once (and after changing stream limits or consumer
    settings) with the admin's variables: eval "$(lockstep env --as admin)". What exists with
    another configuration is reported, not changed (exit 3).
    """
    import nats.errors

    from lockstep_cli.cli_io import fail, settings_of
    from lockstep_cli.supervisor import (
        SERVICES,
        StackSettings,
        provision_topology,
        service_app,
    )
    from lockstep_common.errors import ConfigurationError
    from lockstep_common.subjects import Namespace

    names = service or list(SERVICES)
    unknown = sorted(set(names) - set(SERVICES))
    if unknown:
        fail(f"unknown service(s) {', '.join(unknown)}; choose from {', '.join(SERVICES)}")
    settings = settings_of(StackSettings, "admin")  # or the local stack's admin
    apps = [service_app(name, {}) for name in names]
    try:
        asyncio.run(provision_topology(settings.nats_access(), Namespace(settings.namespace), apps))
    except ConfigurationError as exc:
        fail(str(exc), code=3)
    except nats.errors.TimeoutError:
        # The server drops a call this identity may not make; it shows as a timeout.
        fail(
            "the server did not answer a JetStream call: is this the admin identity? "
            '(eval "$(lockstep env --as admin)")',
            code=3,
        )
    except (OSError, nats.errors.Error) as exc:
        fail(f"NATS unreachable: {type(exc).__name__} {exc}", code=3)
    console.print(f"streams and the consumers of {', '.join(names)} are in place")


@app.command("env")
def env_command(
    data_dir: DataDir = Path(".data"),
    identity: Annotated[
        str, typer.Option("--as", help="NATS identity: cli, agent, admin or a service.")
    ] = "cli",
) -> None:
    """Print the LOCKSTEP_* exports that reach the stack `lockstep up` runs under --data-dir.

    Use as `eval "$(lockstep env)"`. Secrets stay in their files (mode 0600): only paths are
    printed.
    """
    from lockstep_cli import stack_state

    print(stack_state.exports(data_dir.resolve(), identity))


@app.command()
def demo(
    data_dir: Annotated[
        Path | None, typer.Option(help="Keep state here (default: a new temporary directory).")
    ] = None,
) -> None:
    """Run the whole system on embedded NATS and PostgreSQL: an event's journey, drift found on a
    simulated fleet, then a canaried rollout and a bad image halted at the canary."""
    from lockstep_cli.demo import run_demo
    from lockstep_cli.supervisor import Interrupted, stop_signals_unwind

    if data_dir is not None:
        usable_data_dir(data_dir)
    with stop_signals_unwind(), start_refusals_are_one_line():
        try:
            run_demo(console, data_dir)
        except (KeyboardInterrupt, Interrupted):
            # running_system stopped the services, NATS and PostgreSQL on the way out.
            console.print("demo interrupted: every process stopped.")
            raise typer.Exit(130) from None


def usable_data_dir(data_dir: Path) -> None:
    """Create ``data_dir`` if missing; one that cannot be created or written is one line."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--data-dir {data_dir}: {exc.strerror or exc}")
    if not os.access(data_dir, os.W_OK | os.X_OK):
        fail(f"--data-dir {data_dir}: not writable by this user")


@contextlib.contextmanager
def start_refusals_are_one_line() -> Iterator[None]:
    """What stops the stack from starting is one line, never a traceback: a data directory
    whose PostgreSQL cluster cannot be used safely (made by an older version without
    passwords, or its password files lost), or a server or service that exited while
    starting (a port in use, a bad setting), named with its reason and its log, exit 2; a
    configuration the servers refuse, exit 3; a server or service that would not start
    otherwise (not ready in time), its reason, exit 1."""
    from lockstep_common.errors import ConfigurationError
    from lockstep_devstack.postgres import ClusterRefused
    from lockstep_devstack.process import StartFailed

    try:
        yield
    except typer.Exit:
        raise  # a command's own exit code (click's Exit is a RuntimeError: not a start failure)
    except (ClusterRefused, StartFailed) as exc:
        fail(str(exc))
    except ConfigurationError as exc:  # e.g. a stream limit the server cannot reserve
        fail(str(exc), code=3)
    except (RuntimeError, TimeoutError) as exc:  # a server or service that would not start
        fail(str(exc), code=1)


@contextlib.contextmanager
def bench_servers() -> Iterator[tuple[str, str]]:
    """(NATS URL, database URL) for a benchmark: LOCKSTEP_NATS_URL / LOCKSTEP_DATABASE_URL when
    set, else embedded servers in a temporary directory removed afterwards."""
    from lockstep_devstack import Stack

    data_dir = Path(tempfile.mkdtemp(prefix="lockstep-bench-"))
    data_dir.chmod(0o755)
    try:
        with Stack(
            data_dir,
            nats_url=os.environ.get("LOCKSTEP_NATS_URL"),
            database_url=os.environ.get("LOCKSTEP_DATABASE_URL"),
            durable=False,
        ) as servers:
            yield servers.urls()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


@bench.command("update")
def bench_update(
    nodes: Annotated[int, typer.Option(min=1, max=250, help="Nodes in the wave.")] = 16,
    budget: Annotated[int, typer.Option(min=1, help="max_unavailable per pool.")] = 2,
    workers: Annotated[int, typer.Option(min=1, max=256, help="Concurrent claim loops.")] = 8,
    time_scale: Annotated[
        float, typer.Option(min=0.0005, help="Real seconds per simulated minute.")
    ] = 0.05,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """A wave on the simulator: makespan against the bound set by the budget and the seed
    durations, the time from a committed halt to the last new mutating call, and image push
    throughput through lockstep_redfish against a raw multipart client."""
    from lockstep_cli.bench_update import run_bench

    result = asyncio.run(run_bench(nodes, budget, workers, time_scale))
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"bench update: {nodes} nodes, max_unavailable {budget} per pool")
    table.add_column("")
    table.add_column("figure")
    table.add_row("makespan s / lower bound s", f"{result['makespan_s']} / {result['bound_s']}")
    table.add_row("makespan_ratio (goal <= 1.15)", f"{result['makespan_ratio']:.2f}")
    table.add_row("halt_s: halt committed -> last new mutating call (goal <= 1)",
                  "-" if result["halt_s"] is None else f"{result['halt_s']:.3f}")  # fmt: skip
    table.add_row("push MB/s: lockstep_redfish / raw aiohttp (medians)",
                  f"{result['push_library_mb_s']} / {result['push_raw_mb_s']}")  # fmt: skip
    table.add_row("push_ratio (goal >= 0.8)", f"{result['push_ratio']:.2f}")
    table.add_row("node ends (wave)", json.dumps(result["states"]))
    console.print(table)


@bench.command("rollout")
def bench_rollout(
    nodes: Annotated[int, typer.Option(help="Simulated gb200 nodes in the fleet (>= 12).")] = 200,
    time_scale: Annotated[float, typer.Option(help="Real seconds per simulated BMC minute.")] = 0.2,
    report_rate: Annotated[
        float, typer.Option(help="Agent reports/s over the fleet (sets cadence and soaks).")
    ] = 250.0,
    timeout: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 3600.0,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Keep the servers' state and service logs here."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """A whole-fleet rollout (attest, intent, canary, gates, waves) through the five service
    processes on the simulator: makespan against the lower bound of the planner's waves,
    budgets, soaks and the simulated durations; service CPU per node and peak memory."""
    from lockstep_cli.bench_rollout import MIN_NODES, BenchFailed, RolloutOptions, run_bench

    if nodes < MIN_NODES:
        fail(f"--nodes must be at least {MIN_NODES} (5 canary and 5 control nodes), not {nodes}")
    for name, value in (("--time-scale", time_scale), ("--report-rate", report_rate),
                        ("--timeout", timeout)):  # fmt: skip
        if not value > 0:
            fail(f"{name} must be > 0, not {value}")
    if data_dir is not None:
        usable_data_dir(data_dir)
    opts = RolloutOptions(nodes, time_scale, report_rate, timeout, data_dir=data_dir)
    try:
        with start_refusals_are_one_line():
            result = run_bench(opts, say=(lambda _: None) if as_json else console.print)
    except BenchFailed as exc:
        fail(str(exc), code=1)
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"bench rollout: {nodes:,} nodes, time scale {time_scale:g} s/min")
    table.add_column("")
    table.add_column("figure")
    table.add_row("makespan s / lower bound s", f"{result['seconds']} / {result['lower_bound_s']}")
    table.add_row("ratio (goal <= 1.15)", f"{result['ratio']:.3f}")
    table.add_row("service CPU s per node", f"{result['cpu_s_per_node']:.4f}")
    for name, mb in result["peak_mb"].items():
        table.add_row(f"peak RSS {name} (MB)", f"{mb:.0f}")
    console.print(table)
    console.print(
        f"waves: {json.dumps(result['waves'])}; node ends: {result['node_ends']}; "
        f"CPU s per service: {result['cpu_s']}; bench process {result['bench_cpu_s']} s"
    )


@bench.command("bus")
def bench_bus(
    events: Annotated[int, typer.Option(min=100, help="Events per run.")] = 20_000,
    runs: Annotated[int, typer.Option(min=1, help="Runs; medians are reported.")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Outbox -> relay -> JetStream -> inbox events/s vs raw nats-py on the same server."""
    from lockstep_cli.bench_bus import run_bench

    with bench_servers() as urls:
        result = asyncio.run(run_bench(*urls, events, runs))
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"bench bus: {events} events x {runs} runs (medians)")
    for col in ("", "events/s"):
        table.add_column(col)
    table.add_row(
        "lockstep outbox -> relay -> JetStream -> inbox", f"{result['events_per_s']:,.0f}"
    )
    table.add_row("raw nats-py publish + pull + ack (baseline)", f"{result['baseline_per_s']:,.0f}")
    table.add_row("ratio (goal >= 0.3)", f"{result['ratio']:.2f}")
    console.print(table)


@bench.command("attest")
def bench_attest(
    gib: Annotated[float, typer.Option(min=0.01, help="Total image size in GiB.")] = 2.0,
    runs: Annotated[int, typer.Option(min=1, help="Runs; medians are reported.")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Bundle verification MB/s vs hashlib SHA-384 over the same bytes, in the same run."""
    from lockstep_cli.bench_attest import run_bench

    result = run_bench(gib, runs)
    if as_json:
        print(json.dumps(result))
        return
    table = Table(
        title=f"bench attest: {result['bytes'] / (1 << 30):.2f} GiB in "
        f"{result['images']} images x {runs} runs (medians)"
    )
    table.add_column("")
    table.add_column("MB/s")
    table.add_row("lockstep bundle verification (every check)", f"{result['mb_per_s']:,.0f}")
    table.add_row("hashlib sha384, one thread (baseline)", f"{result['baseline_mb_per_s']:,.0f}")
    table.add_row("ratio (goal >= 0.8)", f"{result['ratio']:.2f}")
    console.print(table)


@bench.command("ingest")
def bench_ingest(
    nodes: Annotated[int, typer.Option(min=1, help="Registered nodes.")] = 12_500,
    reports: Annotated[int, typer.Option(min=1, help="Reports timed per run.")] = 50_000,
    rate: Annotated[float, typer.Option(min=1, help="Reports/s of the latency phase.")] = 1_250.0,
    duration: Annotated[float, typer.Option(min=0.1, help="Seconds of the latency phase.")] = 8.0,
    changed: Annotated[
        float, typer.Option(min=0, max=1, help="Share of reports that change a version.")
    ] = 0.02,
    batch: Annotated[int, typer.Option(min=1, max=4096, help="consumer_batch (both).")] = 256,
    runs: Annotated[int, typer.Option(min=1, help="Runs; medians are reported.")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Node reports/s through inventory vs raw JetStream pull + parse + ack (same run), and
    report -> drift.detected latency at a fixed rate."""
    from lockstep_cli.bench_ingest import IngestOptions, run_bench

    opts = IngestOptions(nodes, reports, rate, duration, changed, batch, runs)
    with bench_servers() as urls:
        result = asyncio.run(run_bench(*urls, opts))
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"bench ingest: {nodes} nodes, {reports} reports x {runs} runs (medians)")
    table.add_column("")
    table.add_column("figure")
    table.add_row(
        "inventory: parse, diff, commit, events (reports/s)", f"{result['reports_per_s']:,.0f}"
    )
    table.add_row(
        "raw nats-py pull + parse + ack (reports/s)", f"{result['raw_reports_per_s']:,.0f}"
    )
    table.add_row("ratio (goal >= 0.35)", f"{result['ratio']:.2f}")
    table.add_row(
        f"report -> drift.detected at {rate:,.0f}/s: p50 / p95 / p99 ms (goal p99 <= 250)",
        " / ".join(
            "-" if result[k] is None else f"{result[k]:.0f}" for k in ("p50_ms", "p95_ms", "p99_ms")
        ),
    )
    console.print(table)


@bench.command("sim")
def bench_sim(
    nodes: Annotated[int, typer.Option(min=1, help="Emulated BMCs.")] = 12_500,
    latency_ms: Annotated[
        float, typer.Option(min=0, help="The 'with latency' case (the other has none).")
    ] = 50.0,
    requests: Annotated[int, typer.Option(min=1, help="GETs per run.")] = 50_000,
    runs: Annotated[int, typer.Option(min=1, help="Runs; medians are reported.")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """GETs/s one simulator process serves, without and with latency, vs a plain aiohttp app
    on the same sockets (same run)."""
    from lockstep_sim.bench import run_bench

    plain = run_bench(nodes, 0.0, requests, runs=runs)
    slow = run_bench(nodes, latency_ms, requests, runs=runs)
    if as_json:
        print(json.dumps({**plain, "with_latency": slow}))
        return
    table = Table(title=f"bench sim: {nodes} BMCs, {runs} runs (medians)")
    for col in ("", "GETs/s", "baseline/s", "ratio"):
        table.add_column(col)
    for name, r in (("no latency", plain), (f"{latency_ms:g} ms latency", slow)):
        table.add_row(
            name, f"{r['gets_per_s']:,.0f}", f"{r['baseline_per_s']:,.0f}", f"{r['ratio']:.2f}"
        )
    console.print(table)
    console.print(
        f"startup {plain['startup_s']:.1f} s, RSS {plain['rss_mb']:.0f} MB; baseline: "
        "a plain aiohttp app on the same sockets returning a body of the same size"
    )


@bench.command("sweep")
def bench_sweep(
    nodes: Annotated[int, typer.Option(min=1, help="Emulated BMCs swept per run.")] = 12_500,
    latency_ms: Annotated[
        float, typer.Option(min=0, help="Latency the simulator adds to every request.")
    ] = 200.0,
    expand: Annotated[
        bool,
        typer.Option(
            "--expand/--no-expand",
            help="One $expand GET per BMC, or the collection and every member.",
        ),
    ] = True,
    concurrency: Annotated[
        int, typer.Option(min=1, help="BMCs read at once (and requests in flight).")
    ] = 1024,
    per_bmc: Annotated[int, typer.Option(min=1, help="Requests in flight per BMC.")] = 2,
    runs: Annotated[int, typer.Option(min=1, help="Runs; medians are reported.")] = 3,
    gc_tuned: Annotated[
        bool,
        typer.Option("--gc-tuned/--no-gc-tuned", help="Sweep GC settings (sweeper.sweep_gc)."),
    ] = True,
    commit: Annotated[
        bool,
        typer.Option(
            "--commit/--no-commit",
            help="Time until the last drift event is committed (embedded PostgreSQL, or "
            "LOCKSTEP_DATABASE_URL), or the sweep alone.",
        ),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Full inventory sweep of a simulated fleet, from sweep start to the last drift event
    committed (1% of nodes are pinned to another BMC version), vs raw aiohttp making the same
    requests with the same concurrency against the same simulator in the same run."""
    from lockstep_cli.bench_sweep import run_bench

    with contextlib.ExitStack() as stack:
        database_url = stack.enter_context(bench_servers())[1] if commit else None
        result = run_bench(
            nodes,
            latency_ms,
            expand=expand,
            runs=runs,
            concurrency=concurrency,
            per_bmc=per_bmc,
            gc_tuned=gc_tuned,
            database_url=database_url,
        )
    void = bool(result["errors"] or result["raw_errors"])  # exit 1 with --json too
    if as_json:
        print(json.dumps(result))
        raise typer.Exit(1 if void else 0)
    mode = "$expand" if expand else "no $expand"
    table = Table(
        title=f"bench sweep: {nodes:,} BMCs at {latency_ms:g} ms, {mode}, "
        f"concurrency {concurrency}, {runs} runs (medians)"
    )
    for col in ("", "seconds", "BMCs/s", "client CPU"):
        table.add_column(col)
    table.add_row(
        "lockstep sweep -> last drift event committed" if commit else "lockstep sweep alone",
        f"{result['seconds']:.2f}",
        f"{result['bmcs_per_s']:,.0f}",
        f"{result['client_cpu']:.2f}",
    )
    table.add_row(
        "raw aiohttp, same requests (baseline)",
        f"{result['raw_seconds']:.2f}",
        f"{nodes / result['raw_seconds']:,.0f}",
        f"{result['raw_client_cpu']:.2f}",
    )
    table.add_row("ratio raw / lockstep (goal >= 0.7)", f"{result['ratio']:.2f}", "", "")
    console.print(table)
    console.print(
        f"simulator CPU {result['server_cpu']:.2f} (CPU s per s; ~1.0 = the bottleneck); "
        f"errors {result['errors']} (raw {result['raw_errors']}); "
        f"per run: {result['seconds_runs']} s vs raw {result['raw_seconds_runs']} s"
    )
    if void:
        raise typer.Exit(1)


@bench.command("plan")
def bench_plan(
    nodes: Annotated[int, typer.Option(min=1, help="Nodes in the generated fleet.")] = 12_500,
    domains: Annotated[int, typer.Option(min=1, help="Fabric domains (one rack each).")] = 2_000,
    components: Annotated[int, typer.Option(min=1, max=64, help="Bundle components.")] = 30,
    change_class: Annotated[
        str, typer.Option("--class", help="routine, emergency or power_fabric.")
    ] = "routine",
    runs: Annotated[int, typer.Option(min=1, help="Runs; medians are reported.")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Planning time and peak memory for a generated fleet, and the plan's makespan vs a lower
    bound from the same budgets, windows and durations."""
    from lockstep_cli.bench_plan import command

    command(nodes, domains, components, change_class, runs, console if not as_json else None)


@docs.command("generate")
def docs_generate(
    out: Annotated[Path, typer.Option(help="Docs directory.")] = Path("docs"),
) -> None:
    """Regenerate docs/ from the event models and the services' routers."""
    from lockstep_cli.catalog import parties
    from lockstep_common import schemadocs

    changed = schemadocs.write(out, parties())
    console.print(f"{len(changed)} file(s) changed" + "".join(f"\n  {c}" for c in changed))


@docs.command("check")
def docs_check(out: Annotated[Path, typer.Option(help="Docs directory.")] = Path("docs")) -> None:
    """Exit 1 when docs/ is not what the models and the services' routers generate."""
    from lockstep_cli.catalog import parties
    from lockstep_common import schemadocs

    stale = schemadocs.stale(out, parties())
    if stale:
        console.print(
            "[red]stale (run `lockstep docs generate`):[/]" + "".join(f"\n  {s}" for s in stale)
        )
        raise typer.Exit(1)
    console.print("docs are up to date")
