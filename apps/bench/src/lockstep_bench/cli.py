"""``lockstep bench ...``: benchmarks, each against a baseline measured in the same run."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from lockstep_cli.cli_io import fail, stdout_console
from lockstep_cli.stack_start import bench_servers, start_refusals_are_one_line, usable_data_dir

bench_app = typer.Typer(
    help="Benchmarks: figures and the ratio to a baseline measured in the same run.",
    no_args_is_help=True,
)
console = stdout_console()


@bench_app.command("gate")
def bench_gate(
    nodes: Annotated[
        int, typer.Option(min=10, help="Wave and control size each, for eval_s.")
    ] = 2500,
    samples_per_node: Annotated[
        int, typer.Option(min=3, help="Samples per node and metric in the evaluated window.")
    ] = 30,
    runs: Annotated[
        int, typer.Option(min=1, help="Timed evaluations; the median is reported.")
    ] = 3,
    aa_trials: Annotated[int, typer.Option(min=1, help="A/A trials (no change).")] = 1000,
    detection_trials: Annotated[
        int, typer.Option(min=1, help="Trials with a 5% busbw drop on the canary.")
    ] = 1000,
    environmental_trials: Annotated[
        int, typer.Option(min=1, help="Trials with a fleet-wide busbw drop of 3% to 15%.")
    ] = 500,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic fleets.")] = 0,
    service: Annotated[
        bool,
        typer.Option(
            "--service/--judge-only",
            help="Also run parts (a) and (c) through the healthgate service on NATS and "
            "PostgreSQL (LOCKSTEP_NATS_URL / LOCKSTEP_DATABASE_URL, else embedded servers).",
        ),
    ] = True,
    ingest_nodes: Annotated[
        int, typer.Option(min=15, help="(a, c) Reporting nodes (design load: 12,500).")
    ] = 12_500,
    ingest_reports: Annotated[int, typer.Option(min=1, help="(a) Reports timed per run.")] = 50_000,
    trip_rate: Annotated[
        float, typer.Option(min=1, help="(c) Reports/s meanwhile (design load: 1,250).")
    ] = 1_250.0,
    trip_duration: Annotated[float, typer.Option(min=0.1, help="(c) Seconds of load.")] = 10.0,
    trips: Annotated[int, typer.Option(min=1, help="(c) Hard-rule samples, one per wave.")] = 100,
    service_runs: Annotated[int, typer.Option(min=1, help="(a, c) Runs; medians.")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Judge speed and quality on synthetic fleets generated in the same run: (b) one evaluation
    of a wave against as many controls x 10 metrics (eval_s, goal <= 1 s); (d) false trips in
    A/A trials (goal <= 1%), detection of a 5% busbw drop on a 50-node canary (goal >= 99%),
    fleet-wide drops blamed on the rollout (goal 0). Trials: 50 canary vs 500 control nodes,
    10 samples each. Unless --judge-only, through the service on NATS and PostgreSQL: (a) health
    reports/s ingested vs raw JetStream pull + parse + ack in the same run (ingest_ratio, goal >=
    0.35); (c) p99 from a hard-rule sample published to its gate.tripped arriving, under the design
    load (trip_p99_ms, goal <= 500 ms)."""
    from lockstep_bench.gate import BenchOptions, run_bench
    from lockstep_bench.gate_service import ServiceBenchOptions, run_service_bench

    opts = BenchOptions(
        nodes=nodes,
        samples_per_node=samples_per_node,
        runs=runs,
        aa_trials=aa_trials,
        detection_trials=detection_trials,
        environmental_trials=environmental_trials,
        seed=seed,
    )
    result = run_bench(opts)
    if service:
        service_opts = ServiceBenchOptions(
            nodes=ingest_nodes,
            reports=ingest_reports,
            rate=trip_rate,
            duration_s=trip_duration,
            trips=trips,
            runs=service_runs,
            seed=seed,
        )
        with bench_servers() as urls:
            result.update(asyncio.run(run_service_bench(*urls, service_opts)))
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"bench gate: seed {seed} (medians of {runs} timed runs)")
    table.add_column("")
    table.add_column("figure")
    table.add_column("goal")
    table.add_row(
        f"(b) one evaluation, {nodes:,} canary vs {nodes:,} control x {result['metrics']} "
        f"metrics, {result['rows']:,} samples (s)",
        f"{result['eval_s']:.3f}",
        "<= 1",
    )
    table.add_row(
        "    the same with baseline samples (environmental check) (s)",
        f"{result['eval_with_baseline_s']:.3f}",
        "",
    )
    table.add_row(
        f"(d) A/A false trips ({aa_trials} trials)", f"{result['aa_false_trip_rate']:.2%}", "<= 1%"
    )
    table.add_row(
        "    A/A inconclusive (held for a human)", f"{result['aa_inconclusive_rate']:.2%}", ""
    )
    table.add_row(
        f"    5% busbw drop detected ({detection_trials} trials)",
        f"{result['detection_rate']:.2%}",
        ">= 99%",
    )
    table.add_row(
        f"    fleet-wide drops blamed on the rollout ({environmental_trials} trials)",
        f"{result['environmental_blamed']}",
        "0",
    )
    table.add_row(
        "    fleet-wide drops flagged environmental (inconclusive)",
        f"{result['environmental_flagged_rate']:.2%}",
        "",
    )
    if service:
        table.add_row(
            f"(a) health reports/s through the service ({result['samples_per_s']:,.0f} samples/s)"
            f" vs raw pull + parse + ack ({result['raw_reports_per_s']:,.0f}/s): ratio",
            f"{result['ingest_ratio']:.2f}",
            ">= 0.35",
        )
        table.add_row(
            f"(c) hard-rule sample -> gate.tripped at {trip_rate:,.0f} reports/s: p50 / p99 ms",
            " / ".join(
                "-" if result[k] is None else f"{result[k]:.0f}"
                for k in ("trip_p50_ms", "trip_p99_ms")
            ),
            "p99 <= 500",
        )
    console.print(table)
    if not service:
        console.print("not measured (--judge-only): ingest_ratio (a) and trip_p99_ms (c)")


@bench_app.command("update")
def bench_update(
    nodes: Annotated[int, typer.Option(min=1, max=250, help="Nodes in the wave.")] = 16,
    budget: Annotated[int, typer.Option(min=1, help="max_unavailable per pool.")] = 2,
    workers: Annotated[int, typer.Option(min=1, max=256, help="Concurrent claim loops.")] = 8,
    time_scale: Annotated[
        float, typer.Option(min=0.0005, help="Real seconds per simulated minute.")
    ] = 0.05,
    dialect: Annotated[
        str, typer.Option(help="The Redfish dialect the BMCs speak (lockstep sim serve --dialect).")
    ] = "lockstep",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """A wave on the simulator: makespan against the bound set by the budget and the seed
    durations, the time from a committed halt to the last new mutating call, and image push
    throughput through lockstep_redfish against a raw multipart client, each node flashed as
    its dialect's BMC profile says."""
    from lockstep_bench.update import run_bench
    from lockstep_sim.dialects import dialect_named

    try:
        dialect_named(dialect)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dialect") from None
    result = asyncio.run(run_bench(nodes, budget, workers, time_scale, dialect))
    if as_json:
        print(json.dumps(result))
        return
    title = f"bench update: {nodes} nodes, max_unavailable {budget} per pool, dialect {dialect}"
    table = Table(title=title)
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


@bench_app.command("rollout")
def bench_rollout(
    nodes: Annotated[int, typer.Option(help="Simulated gb200 nodes in the fleet (>= 12).")] = 200,
    time_scale: Annotated[float, typer.Option(help="Real seconds per simulated BMC minute.")] = 0.2,
    report_rate: Annotated[
        float, typer.Option(help="Agent reports/s over the fleet (sets cadence and soaks).")
    ] = 250.0,
    timeout: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 3600.0,
    updaters: Annotated[
        int, typer.Option(help="Updater processes sharing the work (1 to 8), as a deployment.")
    ] = 1,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Keep the servers' state and service logs here."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """A whole-fleet rollout (attest, intent, canary, gates, waves) through the five service
    processes on the simulator: makespan against the lower bound of the planner's waves,
    budgets, soaks and the simulated durations; service CPU per node and peak memory."""
    from lockstep_bench.rollout import MIN_NODES, BenchFailed, RolloutOptions, run_bench

    if nodes < MIN_NODES:
        fail(f"--nodes must be at least {MIN_NODES} (5 canary and 5 control nodes), not {nodes}")
    for name, value in (("--time-scale", time_scale), ("--report-rate", report_rate),
                        ("--timeout", timeout)):  # fmt: skip
        if not value > 0:
            fail(f"{name} must be > 0, not {value}")
    if not 1 <= updaters <= 8:
        fail(f"--updaters must be 1 to 8, not {updaters}")
    if data_dir is not None:
        usable_data_dir(data_dir)
    opts = RolloutOptions(
        nodes, time_scale, report_rate, timeout, updaters=updaters, data_dir=data_dir
    )
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
    table.add_row("machine busy (all cores)", f"{result['machine_busy']:.0%}")
    for name, mb in result["peak_mb"].items():
        table.add_row(f"peak RSS {name} (MB)", f"{mb:.0f}")
    console.print(table)
    console.print(
        f"waves: {json.dumps(result['waves'])}; node ends: {result['node_ends']}; "
        f"CPU s per service: {result['cpu_s']}; bench process {result['bench_cpu_s']} s"
    )


@bench_app.command("bus")
def bench_bus(
    events: Annotated[int, typer.Option(min=100, help="Events per run.")] = 20_000,
    runs: Annotated[int, typer.Option(min=1, help="Runs; medians are reported.")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Outbox -> relay -> JetStream -> inbox events/s vs raw nats-py on the same server."""
    from lockstep_bench.bus import run_bench

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


@bench_app.command("attest")
def bench_attest(
    gib: Annotated[float, typer.Option(min=0.01, help="Total image size in GiB.")] = 2.0,
    runs: Annotated[int, typer.Option(min=1, help="Runs; medians are reported.")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Bundle verification MB/s vs hashlib SHA-384 over the same bytes, in the same run."""
    from lockstep_bench.attest import run_bench

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


@bench_app.command("ingest")
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
    from lockstep_bench.ingest import IngestOptions, run_bench

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


@bench_app.command("sim")
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


@bench_app.command("sweep")
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
    from lockstep_bench.sweep import run_bench

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


@bench_app.command("plan")
def bench_plan(
    nodes: Annotated[int, typer.Option(min=1, help="Nodes in the generated fleet.")] = 12_500,
    domains: Annotated[int, typer.Option(min=1, help="Fabric domains (one rack each).")] = 2_000,
    components: Annotated[int, typer.Option(min=1, max=64, help="Bundle components.")] = 30,
    change_class: Annotated[
        str, typer.Option("--class", help="routine, emergency or power_fabric.")
    ] = "routine",
    runs: Annotated[int, typer.Option(min=1, help="Runs; medians are reported.")] = 3,
    service: Annotated[
        bool,
        typer.Option(
            "--service",
            help="Also plan the fleet through a running planner and inventory (intent in to "
            "rollout.planned out, on NATS and PostgreSQL: LOCKSTEP_NATS_URL / "
            "LOCKSTEP_DATABASE_URL, else embedded servers), against the core in the same run.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Planning time and peak memory for a generated fleet, and the plan's makespan vs a lower
    bound from the same budgets, windows and durations; with --service, the running planner's
    time too."""
    from lockstep_bench.plan import command

    servers = bench_servers if service else None
    command(
        nodes, domains, components, change_class, runs, console if not as_json else None, servers
    )


@bench_app.command("startup")
def bench_startup(
    runs: Annotated[
        int, typer.Option(min=1, help="Runs of each command; medians are reported.")
    ] = 20,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            help="Ask the stack `lockstep up` runs there (default: LOCKSTEP_NATS_URL, else a "
            "stack this command starts and stops).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Wall time from exec to exit of `lockstep --help` and `lockstep fleet admit` (a Slurm
    prolog runs it for every job) against a running stack, vs the interpreter's own start,
    interleaved in the same run."""
    from lockstep_bench.startup import BenchFailed, run_bench

    try:
        result = run_bench(runs, data_dir, say=(lambda _: None) if as_json else console.print)
    except BenchFailed as exc:
        fail(str(exc), code=1)
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"bench startup: {runs} runs each (medians), load {result['load_average']}")
    table.add_column("")
    table.add_column("seconds")
    goal = result["goal_s"]
    table.add_row(f"lockstep --help (goal <= {goal})", f"{result['help_s']:.3f}")
    admit = result["admit_s"]
    table.add_row(
        f"lockstep fleet admit, answered (goal <= {goal})",
        f"skipped: {result['admit_skipped']}" if admit is None else f"{admit:.3f}",
    )
    table.add_row("python -c pass (baseline)", f"{result['baseline_s']:.3f}")
    console.print(table)
    if not result["bytecode_compiled"]:
        console.print(
            "measured without compiled bytecode (every run compiled what it imports): "
            "./dev compiles it"
        )


@bench_app.command("agent")
def bench_agent(
    cycles: Annotated[int, typer.Option(min=10, help="Report cycles to run.")] = 300,
    xid: Annotated[
        bool,
        typer.Option(
            "--xid/--no-xid",
            help="Also measure an XID line in the kernel log -> gate.tripped through the agent "
            "and the healthgate on NATS and PostgreSQL (LOCKSTEP_NATS_URL / "
            "LOCKSTEP_DATABASE_URL, else embedded servers).",
        ),
    ] = True,
    xid_trials: Annotated[
        int, typer.Option(min=1, help="XID trials (one agent and one wave each).")
    ] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """One node agent's CPU per report cycle and its RSS, on 8 GPUs' worth of probes (a fake
    node root and an NVML stand-in), every probe, the disk spool and the sender included.
    Unless --no-xid: an XID line written into the kernel log each agent follows -> the
    healthgate's gate.tripped, p50/p99 over --xid-trials agents at a 10 s cadence (goal p99 <=
    2 s), beside the same report published straight to JetStream in the same run."""
    from lockstep_bench.agent import run_bench

    try:
        result = run_bench(cycles)
    except RuntimeError as exc:
        fail(str(exc), code=1)
    if xid:
        from lockstep_bench.agent_xid import one_run

        with bench_servers() as urls:
            result.update(asyncio.run(one_run(*urls, xid_trials)))
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"bench agent: {cycles} cycles, {result['gpus']} GPUs")
    table.add_column("")
    table.add_column("value")
    table.add_row("CPU per cycle, median (s)", f"{result['cpu_s_per_cycle_median']:.4f}")
    table.add_row("CPU per cycle, p99 (s)", f"{result['cpu_s_per_cycle_p99']:.4f}")
    table.add_row(
        f"of one core at a {result['cadence_s']:.0f} s cadence (goal <= "
        f"{result['goal_cpu_percent']} %)",
        f"{result['cpu_percent_of_core']:.3f} %",
    )
    table.add_row(
        f"peak RSS (goal <= {result['goal_rss_mb']:.0f} MB)", f"{result['rss_mb']:.1f} MB"
    )
    table.add_row("RSS with the modules imported (baseline)", f"{result['rss_imported_mb']:.1f} MB")
    if xid:
        table.add_row(
            f"XID line -> gate.tripped, p50 / p99 over {result['xid_trials']} (goal p99 <= "
            f"{result['goal_xid_to_trip_p99_ms']:.0f} ms)",
            f"{result['xid_to_trip_p50_ms']} / {result['xid_to_trip_p99_ms']} ms",
        )
        table.add_row(
            "the report published straight -> gate.tripped, p50 / p99 (baseline)",
            f"{result['direct_report_to_trip_p50_ms']} / "
            f"{result['direct_report_to_trip_p99_ms']} ms",
        )
        table.add_row("ratio of the p50s", f"{result['xid_ratio_p50']}")
    console.print(table)
