"""How ``lockstep fleet ...`` shows things: JSON shapes and rich tables (no I/O but printing)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lockstep_common.subjects import Namespace

if TYPE_CHECKING:
    # Types only: `fleet admit` (a Slurm prolog, once per job) shows its answer without
    # loading the sweeper's HTTP client or the database queries.
    from lockstep_common.events.v1 import (
        AdmissionCheckAnswered,
        FleetDriftAnswered,
        FleetShowAnswered,
        FleetSweepAnswered,
        SweptNode,
    )


def _table(*headers: str, title: str | None = None) -> Table:
    """A table that wraps long versions and details instead of cutting them (an operator
    comparing versions must see all of them)."""
    table = Table(*headers, title=title)
    for column in table.columns:
        column.overflow = "fold"
    return table


def sweep_doc(done: FleetSweepAnswered, nodes: Iterable[SweptNode]) -> dict[str, Any]:
    """A sweep (``fleet.sweep``'s answer) and its nodes' outcomes (``fleet.swept``), as JSON."""
    sweep = done.sweep
    assert sweep is not None  # noqa: S101 - the caller reports a sweep that did not finish
    return {
        "sweep": {
            "id": sweep.id,
            "total": sweep.total,
            "unreadable": sweep.unreadable,
            "seconds": round(sweep.seconds or 0.0, 3),
            "drift_detected": done.drift_detected,
            "drift_resolved": done.drift_resolved,
        },
        "nodes": [n.model_dump(mode="json") for n in nodes],
    }


WORST = 10
"""Nodes a summary names; the rest are counted (``--all`` lists every node)."""
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def print_sweep(console: Console, doc: dict[str, Any], *, every_node: bool = False) -> None:
    """A summary that reads the same for 8 nodes or 12,500: unreadable nodes first (up to
    :data:`WORST`), then each component's versions with how many nodes run each; with
    ``every_node``, one row per node."""
    if every_node:
        table = _table("node", "read", "components")
        for n in doc["nodes"]:
            if n["readable"]:
                comps = "\n".join(f"{c} {v}" for c, v in n["components"].items())
                table.add_row(n["id"], "[green]ok[/]", comps or "(none mapped)")
            else:
                table.add_row(n["id"], "[red]UNREADABLE[/]", f"[red]{n['error']}[/]")
        console.print(table)
    else:
        unreadable = [n for n in doc["nodes"] if not n["readable"]]
        if unreadable:
            table = _table("node", "read", "error", title="unreadable BMCs")
            for n in unreadable[:WORST]:
                table.add_row(n["id"], "[red]UNREADABLE[/]", f"[red]{n['error']}[/]")
            console.print(table)
            if len(unreadable) > WORST:
                console.print(f"... and {len(unreadable) - WORST} more unreadable")
        versions: dict[str, Counter[str]] = defaultdict(Counter)
        for n in doc["nodes"]:
            for component, version in n["components"].items():
                versions[component][version] += 1
        table = _table("component", "versions (nodes)", title="what the fleet runs")
        for component, seen in sorted(versions.items()):
            table.add_row(component, "\n".join(f"{v} ({k})" for v, k in seen.most_common()))
        if versions:
            console.print(table)
    s = doc["sweep"]
    bad = f"[red]{s['unreadable']} unreadable[/]" if s["unreadable"] else "0 unreadable"
    console.print(
        f"sweep {s['id']}: {s['total']} node(s) in {s['seconds']:.1f}s, {bad}, drift detected on "
        f"{s['drift_detected']}, resolved on {s['drift_resolved']}"
        + ("" if every_node else " (--all: every node; --json: everything, for scripts)")
    )


def print_status(console: Console, doc: dict[str, Any]) -> None:
    """The ``fleet.status`` answer as JSON (``model_dump(mode="json")``), as a table."""
    table = _table(
        "pool", "profile", "nodes", "conforming", "drifted", "unreadable", "unobserved", "ratio"
    )
    for g in [*doc["groups"], {"pool": "[b]fleet[/]", "profile": "", **doc["fleet"]}]:
        table.add_row(
            g["pool"],
            g["profile"],
            *(str(g[k]) for k in ("nodes", "conforming", "drifted", "unreadable", "unobserved")),
            f"{g['conformance_ratio']:.1%}",
        )
    console.print(table)
    kinds = doc["drifted_by_kind"]
    console.print(
        "drifted nodes by kind: "
        + (", ".join(f"{k} {n}" for k, n in kinds.items()) if kinds else "none")
    )
    sweep = doc["sweep"]
    if sweep is None:
        console.print("no sweep yet")
    elif sweep["finished_at"] is None and doc.get("sweep_running"):
        console.print(f"sweep {sweep['id']} running: {sweep['done']}/{sweep['total']}")
    elif sweep["finished_at"] is None:
        console.print(
            f"sweep {sweep['id']} unfinished at {sweep['done']}/{sweep['total']}: no sweeper "
            "holds the lock (it stopped; the next sweep closes it)"
        )
    else:
        err = f", [red]ended early: {sweep['error']}[/]" if sweep["error"] else ""
        console.print(
            f"last sweep {sweep['id']}: finished {sweep['finished_at']} ({sweep['total']} nodes, "
            f"{sweep['unreadable']} unreadable, {sweep['seconds']:.1f}s){err}"
        )


def show_json(answer: FleetShowAnswered) -> dict[str, Any]:
    """``fleet show --json``: the answer, observations keyed by source."""
    doc = answer.model_dump(mode="json")
    doc["observations"] = {
        o.pop("source"): o for o in sorted(doc["observations"], key=lambda o: o["source"])
    }
    return {k: doc[k] for k in ("node", "observations", "pin_stack_hash", "drift", "history")}


def print_show(console: Console, doc: dict[str, Any]) -> None:
    n = doc["node"]
    console.print(f"[b]{n['id']}[/]  " + "  ".join(f"{k}={v}" for k, v in n.items() if k != "id"))
    console.print(f"pin: {doc['pin_stack_hash'] or '(not pinned)'}")
    for source, o in doc["observations"].items():
        state = "[green]readable[/]" if o["readable"] else f"[red]UNREADABLE: {o['error']}[/]"
        console.print(f"\n[b]{source}[/] report of {o['observed_at']}: {state}")
        table = _table("component", "version")
        for c, v in o["components"].items():
            table.add_row(c, v)
        for c, by_member in o["conflicts"].items():
            table.add_row(
                c,
                "[yellow]conflict: " + ", ".join(f"{m}={v}" for m, v in by_member.items()) + "[/]",
            )
        console.print(table)
        console.print(
            f"{len(o['members'])} member(s): "
            + ", ".join(f"{m}={v}" for m, v in o["members"].items())
        )
        if o["loaded_module"] is not None:
            console.print(f"loaded module: {o['loaded_module']}")
        if o["firmware_dirs"] is not None:
            console.print(f"firmware dirs: {', '.join(o['firmware_dirs']) or '(none)'}")
    if not doc["observations"]:
        console.print("no report yet")
    drift = doc["drift"]
    if drift and drift["items"]:
        console.print(f"\n[b]drift[/] since {drift['since']}")
        console.print(_items_table(drift["items"]))
    else:
        console.print("\nno drift" if drift else "\nnot evaluated yet")
    if doc["history"]:
        table = _table("observed_at", "source", "item", "old", "new", title="recent history")
        for h in doc["history"]:
            table.add_row(h["observed_at"], h["source"], h["item"], h["old"] or "", h["new"] or "")
        console.print(table)


def _items_table(items: Iterable[dict[str, Any]]) -> Table:
    table = _table("component", "kind", "severity", "expected", "actual", "detail")
    for i in items:
        table.add_row(
            i["component"],
            i["kind"],
            i["severity"],
            i["expected"] or "-",
            i["actual"] or "-",
            i["detail"],
        )
    return table


def drift_json(pages: Iterable[FleetDriftAnswered]) -> list[dict[str, Any]]:
    """``fleet drift --json``: every drifted node of every page, in node id order."""
    return [n.model_dump(mode="json") for page in pages for n in page.nodes]


def print_drift(
    console: Console, doc: list[dict[str, Any]], namespace: str, *, every_node: bool = False
) -> None:
    """Counts by kind and severity and the worst nodes (most severe, then most items); with
    ``every_node``, each drifted node's items in full."""
    if every_node and doc:
        # One table, not one per node: rich lays out each table on its own (3,000 tables took
        # 10 s; one of 3,000 rows takes about a second).
        table = _table("node", "site", "profile", "since", "component", "kind", "severity")
        for column in ("expected", "actual", "detail"):
            table.add_column(column, overflow="fold")
        for e in doc:
            for n, i in enumerate(e["items"]):
                first = n == 0
                table.add_row(
                    e["node"] if first else "",
                    e["site"] if first else "",
                    e["profile"] if first else "",
                    e["since"][:19] if first else "",
                    i["component"],
                    i["kind"],
                    i["severity"],
                    i["expected"] or "-",
                    i["actual"] or "-",
                    i["detail"],
                )
        console.print(table)
    elif doc:
        kinds: Counter[tuple[str, str]] = Counter()
        nodes: dict[tuple[str, str], set[str]] = defaultdict(set)
        for e in doc:
            for i in e["items"]:
                kinds[(i["kind"], i["severity"])] += 1
                nodes[(i["kind"], i["severity"])].add(e["node"])
        table = _table("kind", "severity", "nodes", "items", title="drift by kind")
        for (kind, severity), count in sorted(
            kinds.items(), key=lambda kv: (SEVERITY_RANK.get(kv[0][1], 9), kv[0][0])
        ):
            table.add_row(kind, severity, str(len(nodes[(kind, severity)])), str(count))
        console.print(table)
        worst = sorted(doc, key=_badness)[:WORST]
        table = _table("node", "profile", "site", "items", title=f"worst {len(worst)} node(s)")
        for e in worst:
            shown = sorted(e["items"], key=lambda i: SEVERITY_RANK.get(i["severity"], 9))
            table.add_row(
                e["node"],
                e["profile"],
                e["site"],
                "\n".join(f"{i['component']} {i['kind']} ({i['severity']})" for i in shown[:4])
                + (f"\n... {len(shown) - 4} more" if len(shown) > 4 else ""),
            )
        console.print(table)
    console.print(
        f"{len(doc)} drifted node(s)"
        + ("" if every_node or not doc else " (--all: every node in full; --json: for scripts)")
    )
    ns = Namespace(namespace)
    console.print(
        f"live drift events: nats sub '{ns.wire('drift.>')}' as NATS identity reader "
        f"(lockstep env --as reader; subjects {ns.wire('drift.detected|resolved.<site>.<node>')})"
    )


def _badness(entry: dict[str, Any]) -> tuple[int, int, str]:
    """Sort key: most severe item first, then most items, then node id."""
    ranks = [SEVERITY_RANK.get(i["severity"], 9) for i in entry["items"]] or [9]
    return (min(ranks), -len(entry["items"]), entry["node"])


def print_stragglers(console: Console, findings: list[dict[str, Any]]) -> None:
    """Per profile: its stragglers worst first, and the versions they share."""
    if not findings:
        console.print("no straggler evaluation yet (the healthgate evaluates every 5 minutes)")
        return
    for f in findings:
        when = f"{f['evaluated_at'][:19]}, {f['window_s']}s window"
        if not f["stragglers"]:
            console.print(f"[b]{f['profile']}[/]: no straggler among {f['nodes']} node(s) ({when})")
            continue
        table = _table(
            "node", "site", "signal", "median", "peers", "below by (sigma)",
            title=f"{f['profile']}: {len(f['stragglers'])} straggler(s) of {f['nodes']} ({when})",
        )  # fmt: skip
        for n in f["stragglers"][:WORST]:
            table.add_row(
                n["node_id"],
                n["site"],
                n["metric"],
                f"{n['value']:g}",
                f"{n['peer_median']:g}",
                f"{n['deviations']:.1f}",
            )
        console.print(table)
        if len(f["stragglers"]) > WORST:
            console.print(f"... and {len(f['stragglers']) - WORST} more (--json: all)")
        for v in f["shared_versions"]:
            console.print(
                f"  they share {v['component']} {v['version']}: {v['stragglers_with']} of "
                f"{v['stragglers']} stragglers, {v['peers_with']} of {v['peers']} healthy peers "
                f"(p = {v['p_value']:.2g})"
            )


def admit_json(answer: AdmissionCheckAnswered) -> dict[str, Any]:
    return {
        "stack_hash": answer.stack_hash,
        "admitted": all(n.admitted for n in answer.nodes),
        "nodes": [n.model_dump(mode="json") for n in answer.nodes],
    }


def print_admit(console: Console, doc: dict[str, Any]) -> None:
    # Reasons are the service's text, not markup: "[old]" in one is printed, not swallowed.
    for n in doc["nodes"]:
        if n["admitted"]:
            console.print(f"{escape(n['node_id'])}  [green]admitted[/]")
        else:
            reasons = escape("; ".join(n["reasons"]))
            console.print(f"{escape(n['node_id'])}  [red]refused[/]: {reasons}")
