"""``lockstep bench plan``: planning time, peak memory and makespan vs a lower bound.

The fleet is generated in the shape asked for (issue 10, deliverable 10): nodes dealt into
fabric domains of equal size, one rack per domain (an NVL72 rack is one NVLink domain), four
sites, a pool per 50 domains with ``max_unavailable`` of 10% (at least a whole domain), every
other pool open only in a nightly 8-hour maintenance window, three profiles with two suppliers
each and two starting stacks (12 strata), A/B power feeds alternating, and a few sick, busy,
drifted or unreadable nodes. Everything is drawn from a fixed seed, so runs are comparable.

Time is measured without tracemalloc (it slows allocation several-fold); peak memory in one
more run under tracemalloc, which counts what planning allocates, plan included. The lower
bound comes from the same run (``domain.bounds``), so the ratio is a property of the packing.
"""

from __future__ import annotations

import json
import random
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.table import Table

from lockstep_cli.cli_io import fail
from lockstep_common.events.v1 import ScopeSelector
from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.adapters.policy_file import packaged_policy
from lockstep_planner.domain.classes import UnfitNodes
from lockstep_planner.domain.fleet import (
    Bundle,
    BundleComponent,
    ComponentKind,
    Node,
    Pool,
    PowerSide,
    Window,
)
from lockstep_planner.domain.plan import Plan, PlanRequest, plan
from lockstep_planner.domain.plan_hash import plan_hash
from lockstep_planner.domain.refusal import PlanRefused

NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)
PROFILES = {
    "gb200": ("supplier-a", "supplier-b"),
    "gb300": ("supplier-a", "supplier-c"),
    "b200": ("supplier-b", "supplier-d"),
}
OLD, OLDER, TARGET = "a" * 64, "b" * 64, "c" * 64
DOMAINS_PER_POOL = 50
SITES = 4


def fleet(
    nodes: int, domains: int, *, unfit: bool = True, seed: int = 7
) -> tuple[tuple[Node, ...], dict[str, Pool]]:
    """A generated fleet of ``nodes`` nodes in ``domains`` fabric domains, and its pools;
    ``unfit``: a few nodes drifted or unreadable (a class that refuses them gets none)."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible benchmark fleet, not a secret
    domains = max(1, min(domains, nodes))
    profiles = list(PROFILES)
    pools_n = max(1, domains // DOMAINS_PER_POOL)
    members: dict[str, int] = {}
    out: list[Node] = []
    for i in range(nodes):
        d = i * domains // nodes
        pool = f"pool-{d * pools_n // domains:03d}"
        profile = profiles[d % len(profiles)]
        out.append(
            Node(
                id=f"n{i:05d}",
                profile=profile,
                supplier=PROFILES[profile][(d // len(profiles)) % 2],
                site=f"site-{d * SITES // domains}",
                rack=f"rack-{d:04d}",
                pool=pool,
                fabric_domain=f"fd-{d:04d}",
                power_side=PowerSide.A if i % 2 == 0 else PowerSide.B,
                stack=OLDER if rng.random() < 0.1 else OLD,
                drifted=unfit and rng.random() < 0.002,
                readable=not unfit or rng.random() >= 0.001,
                idle=rng.random() < 0.4,
                healthy=rng.random() >= 0.02,
            )
        )
        members[pool] = members.get(pool, 0) + 1
    biggest_domain = -(-nodes // domains)
    nightly = tuple(
        Window(day.replace(hour=22), day.replace(hour=22) + timedelta(hours=8))
        for day in (NOW + timedelta(days=k) for k in range(-1, 365))
    )
    pools = {
        name: Pool(
            name,
            max(biggest_domain, count // 10),
            nightly if int(name.rsplit("-", 1)[1]) % 2 else None,
        )
        for name, count in members.items()
    }
    return tuple(out), pools


def bundle(components: int, *, one_way: bool, seed: int = 11) -> Bundle:
    """A bundle of ``components`` components: a third software, switch firmware, the rest
    A/B firmware, plus one-way and PSU/BBU firmware when the class allows them."""
    rng = random.Random(seed)  # noqa: S311 - reproducible durations
    kinds = [ComponentKind.SOFTWARE] * max(1, components // 3) + [ComponentKind.FABRIC_SWITCH] * 2
    if one_way:
        kinds += [ComponentKind.ONE_WAY_FIRMWARE] * 2 + [ComponentKind.PSU_BBU] * 2
    kinds += [ComponentKind.AB_FIRMWARE] * max(0, components - len(kinds))
    out = []
    for i, kind in enumerate(kinds[:components]):
        software = kind is ComponentKind.SOFTWARE
        out.append(
            BundleComponent(
                name=f"c{i:02d}-{kind}",
                version=f"1.{i}.0",
                kind=kind,
                stage_s=rng.randint(60, 300) if software else rng.randint(300, 900),
                activate_s=rng.randint(30, 120) if software else rng.randint(60, 300),
                impactless_staging=software or rng.random() < 0.5,
                # Every fourth component is profile-specific, as VBIOS images are.
                profiles=frozenset({list(PROFILES)[i % 3]}) if i % 4 == 3 else None,
            )
        )
    return Bundle(TARGET, tuple(out))


def _request(nodes: int, domains: int, components: int, change_class: ChangeClass) -> PlanRequest:
    policy = packaged_policy()[change_class]
    fleet_nodes, pools = fleet(nodes, domains, unfit=policy.unfit_nodes is UnfitNodes.EXCLUDE)
    return PlanRequest(
        fleet=fleet_nodes,
        pools=pools,
        bundle=bundle(components, one_way=policy.one_way_allowed),
        scope=ScopeSelector(),
        change_class=change_class,
        policy=policy,
        seed="bench",
        tested_revert=True,
    )


def run_bench(
    nodes: int, domains: int, components: int, runs: int, change_class: ChangeClass
) -> dict[str, Any]:
    """Plan the generated fleet ``runs`` times (medians), then once more under tracemalloc."""
    request = _request(nodes, domains, components, change_class)
    seconds: list[float] = []
    result: Plan | None = None
    for _ in range(runs):
        started = time.perf_counter()
        result = plan(request, now=NOW)
        seconds.append(time.perf_counter() - started)
    assert result is not None  # noqa: S101 - runs >= 1
    tracemalloc.start()
    try:
        plan(request, now=NOW)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    soak = sum(s.soak_s for w in result.waves for s in w.stages)
    return {
        "nodes": nodes,
        "domains": domains,
        "components": components,
        "change_class": str(change_class),
        "runs": runs,
        "seconds": round(statistics.median(seconds), 3),
        "seconds_runs": [round(s, 3) for s in seconds],
        "peak_mb": round(peak / 1e6, 1),
        "rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3, 1),
        "makespan_s": result.makespan_s,
        "lower_bound_s": result.lower_bound_s,
        "ratio": round(result.makespan_s / max(1, result.lower_bound_s), 3),
        "soak_s": soak,
        "waves": len(result.waves),
        "canary_nodes": len(result.waves[0].node_ids),
        "excluded": len(result.excluded),
        "plan_hash": plan_hash(result),
    }


def command(
    nodes: int,
    domains: int,
    components: int,
    change_class: str,
    runs: int,
    console: Console | None,
    servers: Callable[[], AbstractContextManager[tuple[str, str]]] | None = None,
) -> None:
    """Run the bench and print a table on ``console``, or JSON when it is None; with
    ``servers`` (NATS and database URLs), the running-service path too (``bench_plan_service``,
    routine class)."""
    try:
        chosen = ChangeClass(change_class)
    except ValueError:
        fail(f"--class: {change_class!r} is not one of {', '.join(ChangeClass)}")
    try:
        result = run_bench(nodes, domains, components, runs, chosen)
    except PlanRefused as exc:
        fail(f"the generated fleet cannot be planned as {chosen}: {exc}")
    if servers is not None:
        import asyncio

        from lockstep_bench.plan_service import run_service_bench

        with servers() as urls:
            result.update(asyncio.run(run_service_bench(*urls, nodes, domains, components, runs)))
    if console is None:
        print(json.dumps(result))
        return
    table = Table(
        title=f"bench plan: {nodes:,} nodes, {domains:,} domains, {components} components, "
        f"{chosen}, {runs} runs (medians)"
    )
    table.add_column("")
    table.add_column("figure")
    table.add_row("planning time (goal <= 2 s)", f"{result['seconds']:.3f} s")
    table.add_row("peak memory, tracemalloc (goal <= 500 MB)", f"{result['peak_mb']:.1f} MB")
    table.add_row("makespan (soaks included)", f"{result['makespan_s'] / 3600:,.1f} h")
    table.add_row("lower bound (same soaks)", f"{result['lower_bound_s'] / 3600:,.1f} h")
    table.add_row("ratio (goal <= 1.15)", f"{result['ratio']:.3f}")
    if servers is not None:
        table.add_row(
            "running planner: intent -> rollout.planned (goal <= 3 s)",
            f"{result['service_s']:.3f} s",
        )
        table.add_row(
            "in-memory core, same fleet and bundle, same run", f"{result['core_s']:.3f} s"
        )
        table.add_row("running planner / core", f"{result['service_ratio']}")
    console.print(table)
    console.print(
        f"{result['waves']} waves, canary {result['canary_nodes']} nodes, "
        f"{result['excluded']} excluded, soaks {result['soak_s'] / 3600:,.1f} h; "
        f"per run: {result['seconds_runs']} s"
        + (
            f"; running planner per run: {result['service_runs']} s (core {result['core_runs']} s)"
            if servers is not None
            else ""
        )
    )
