"""``lockstep fleet ...``: the fleet registry (inventory service)."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from lockstep_cli.cli_io import (
    StackDirOption,
    VerboseOption,
    choose_stack,
    fail,
    run,
    settings_of,
    stdout_console,
)

if TYPE_CHECKING:
    from rich.console import Console

    from lockstep_common.events.v1 import RegisteredNode
    from lockstep_common.operator_settings import OperatorSettings
    from lockstep_common.vocabulary import Component

fleet_app = typer.Typer(
    help="The fleet: import and list nodes, sweep them, conformance, drift, pins, admission.",
    no_args_is_help=True,
)


@functools.cache
def _console() -> Console:
    """Standard output, made when something is printed with rich: `fleet admit` (a Slurm
    prolog, once per job) prints its answer without loading rich when not on a terminal."""
    return stdout_console()


Json = Annotated[bool, typer.Option("--json", help="Print JSON only.")]
INVENTORY = "inventory"  # the service that answers these commands (lockstep_common.operator)
T = TypeVar("T")


@fleet_app.callback()
def fleet_stack(data_dir: StackDirOption = None, verbose: VerboseOption = False) -> None:
    """Asks the inventory over LOCKSTEP_NATS_URL, or else over the NATS of the `lockstep up`
    running under --data-dir (LOCKSTEP_DATA_DIR, default .data), as its cli identity: no
    database, no BMC credentials here."""
    choose_stack(data_dir, verbose)


def _settings() -> OperatorSettings:
    """Where the inventory is asked, from LOCKSTEP_* (a bad variable: exit 2 naming it)."""
    from lockstep_common.operator_settings import OperatorSettings

    return settings_of(OperatorSettings)


def _known_profiles(settings: OperatorSettings) -> frozenset[str]:
    """The hardware profiles the inventory's compatibility rules describe (its rules file,
    LOCKSTEP_INVENTORY_RULES_FILE, or the packaged table): the profiles a stack may name."""
    from lockstep_common.compatibility.files import load_rules
    from lockstep_common.errors import ConfigurationError

    try:
        return frozenset(load_rules(settings.inventory_rules_file).profile_architecture)
    except ConfigurationError as exc:
        fail(str(exc))


def _read(source: str) -> str:
    if source.startswith(("http://", "https://")):
        import urllib.request

        with urllib.request.urlopen(source, timeout=30) as resp:  # noqa: S310 - an operator's URL
            return str(resp.read().decode())
    return Path(source).read_text()


@fleet_app.command("import")
def fleet_import(
    source: Annotated[
        str, typer.Argument(help="Fleet file (YAML/JSON) or a simulator's /fleet.json URL.")
    ],
    credentials: Annotated[
        str | None,
        typer.Option(
            help="Credential reference for nodes that name none (env:PREFIX or file:/path; a "
            "file only its owner may read, as the inventory checks where it sweeps)."
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Validate the whole file, then have the inventory add or update every node, all or nothing.

    The file is checked here first (every bad node named; secrets are refused: reference them
    with env: or file:), then sent to the inventory in chunks that fit the bus. The inventory
    checks each chunk again: profiles its compatibility rules know, and every file: reference a
    regular file only its owner may read, where it sweeps. It writes every node in one
    transaction when the last chunk arrives, and records who asked (the reader identity is
    refused). Nothing is written when anything is refused.
    """
    import uuid

    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import FleetImportAnswered, FleetImportRequested
    from lockstep_common.fleet_file import FleetFileError, parse_fleet

    settings = _settings()
    try:
        nodes = parse_fleet(_read(source), default_credentials=credentials)
    except OSError as exc:
        fail(f"{source}: {exc}")
    except FleetFileError as exc:
        if len(exc.problems) == 1:
            fail(f"{source}: {exc.problems[0]}")
        # Every bad node, one per line: the file is fixed in one pass, not one error per try.
        fail(
            f"{source}: {len(exc.problems)} invalid nodes, nothing imported:\n  "
            + "\n  ".join(exc.problems)
        )
    import_id = uuid.uuid4()
    chunks = _chunks([n.model_dump() for n in nodes])
    answer: FleetImportAnswered | None = None
    for number, (first, chunk) in enumerate(chunks):
        request = FleetImportRequested.model_validate(
            {
                "import_id": import_id,
                "chunk": number,
                "chunks": len(chunks),
                "first_index": first,
                "nodes": chunk,
            },
            strict=False,
        )
        # The last chunk writes every node of the import in one transaction: more than the
        # default 10 s may pass on a loaded database before its answer.
        answer = ask(
            settings,
            INVENTORY,
            "fleet.import",
            request,
            FleetImportAnswered,
            timeout_s=IMPORT_TIMEOUT_S,
            what=source,
        )
    if answer is None or not answer.committed:  # the last chunk's answer commits the import
        fail(f"{source}: the inventory did not commit import {import_id}", 1)
    summary = {
        "nodes": answer.nodes,
        "added": answer.added,
        "updated": answer.updated,
        "unchanged": answer.unchanged,
    }
    if as_json:
        print(json.dumps(summary))
    else:
        _console().print(
            f"imported {answer.nodes} node(s): {answer.added} added, {answer.updated} "
            f"updated, {answer.unchanged} unchanged"
        )


IMPORT_TIMEOUT_S = 120.0
CHUNK_BYTES = 256 << 10
"""Nodes per ``fleet.import`` request, by encoded size: well inside NATS's default 1 MiB."""


def _chunks(nodes: list[dict[str, Any]]) -> list[tuple[int, list[dict[str, Any]]]]:
    """``(index of its first node, nodes)`` per request: at most ``MAX_OPS_PAGE`` nodes and
    about ``CHUNK_BYTES`` each."""
    from lockstep_common.events.v1 import MAX_OPS_PAGE

    chunks: list[tuple[int, list[dict[str, Any]]]] = []
    size = 0
    for index, node in enumerate(nodes):
        length = len(json.dumps(node))
        if not chunks or len(chunks[-1][1]) >= MAX_OPS_PAGE or size + length > CHUNK_BYTES:
            chunks.append((index, []))
            size = 0
        chunks[-1][1].append(node)
        size += length
    return chunks


@fleet_app.command("list")
def fleet_list(as_json: Json = False) -> None:
    """Every registered node (credential references only, never secrets), asked of the
    inventory a page at a time."""
    nodes = _registered_nodes()
    if as_json:
        print(json.dumps([n.model_dump(mode="json") for n in nodes]))
        return
    for n in nodes:
        _console().print(f"{n.id}  {n.profile:10} {n.site:8} {n.pool:12} {n.bmc_url}")


def _registered_nodes() -> list[RegisteredNode]:
    """The whole registry, from the inventory (``fleet.list``, page by page)."""
    from lockstep_cli.ops_client import pages
    from lockstep_common.events.v1 import FleetListAnswered, FleetListRequested

    return [
        n
        for page in pages(
            _settings(),
            INVENTORY,
            "fleet.list",
            lambda after: FleetListRequested(after=after),
            FleetListAnswered,
            lambda page: page.next_after,
        )
        for n in page.nodes
    ]


@fleet_app.command("remove")
def fleet_remove(
    nodes: Annotated[list[str], typer.Argument(help="Node ids to forget.")],
) -> None:
    """Forget nodes (to undo an import): their registry entries, latest reports and drift.

    All or nothing: an id that is not registered is named and nothing is removed. Their
    history and rollout records stay. The inventory does it, and records who asked.
    """
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import FleetRemoveAnswered, FleetRemoveRequested

    request = _valid(lambda: FleetRemoveRequested(node_ids=tuple(nodes)))
    done = ask(_settings(), INVENTORY, "fleet.remove", request, FleetRemoveAnswered)
    _console().print(f"removed {len(done.removed)} node(s)")


def _valid(make: Callable[[], T], what: str = "") -> T:
    """A request built from the command line; bad input is one line naming it (exit 2)."""
    from pydantic import ValidationError

    try:
        return make()
    except ValidationError as exc:
        err = exc.errors()[0]
        where = what or ".".join(str(p) for p in err["loc"]) or "(root)"
        fail(f"{where}: {err['msg']}")


@fleet_app.command("sweep")
def fleet_sweep(
    node: Annotated[
        list[str] | None, typer.Option("--node", help="Sweep only this node (repeatable).")
    ] = None,
    every_node: Annotated[
        bool, typer.Option("--all", help="One row per node instead of the summary.")
    ] = False,
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for the sweep to finish.", min=1)
    ] = 900.0,
    as_json: Json = False,
) -> None:
    """Have the inventory read every registered BMC (or --node ones) now, and show each node's
    outcome.

    The inventory's own sweep worker does it, with the inventory's credentials (this command
    never holds a BMC's), and commits it like its periodic sweep (state and drift events), after
    a periodic sweep already running. Prints a summary (unreadable BMCs with the reason, each
    component's versions with their node counts); --all one row per node, --json everything.
    Exit 0: every BMC read; 1: some unreadable, the sweep did not finish, or another `fleet
    sweep` is under way (refused); 2: bad input (an unregistered node: nothing swept); 3: no
    answer.
    """
    from lockstep_cli.fleet_progress import bar, while_sweeping
    from lockstep_cli.fleet_views import print_sweep, sweep_doc
    from lockstep_cli.ops_client import ask, pages
    from lockstep_common.events.v1 import (
        FleetStatusAnswered,
        FleetStatusRequested,
        FleetSweepAnswered,
        FleetSweepRequested,
        FleetSweptAnswered,
        FleetSweptRequested,
    )

    settings = _settings()
    request = _valid(lambda: FleetSweepRequested(node_ids=tuple(node or ())), "--node")

    def sweep() -> FleetSweepAnswered:
        return ask(
            settings, INVENTORY, "fleet.sweep", request, FleetSweepAnswered, timeout_s=timeout
        )

    def status() -> FleetStatusAnswered:
        return ask(settings, INVENTORY, "fleet.status", FleetStatusRequested(), FleetStatusAnswered)

    try:
        # On a terminal, a bar of the running sweep's progress while the inventory sweeps.
        with bar(_console(), "sweeping", enabled=not as_json) as draw:
            done = while_sweeping(sweep, status, draw)
    except KeyboardInterrupt:
        fail(
            "interrupted: the inventory carries on with the sweep and commits what it reads "
            "(lockstep fleet status --watch follows it)",
            130,
        )
    if done.sweep is None or done.sweep.finished_at is None or done.sweep.error:
        why = "" if done.sweep is None or not done.sweep.error else f": {done.sweep.error}"
        fail(f"the inventory's sweep did not finish{why} (its log says why)", 1)
    sweep_id = done.sweep.id
    nodes = [
        n
        for page in pages(
            settings,
            INVENTORY,
            "fleet.swept",
            lambda after: FleetSweptRequested(sweep_id=sweep_id, after=after),
            FleetSweptAnswered,
            lambda page: page.next_after,
        )
        for n in page.nodes
    ]
    doc = sweep_doc(done, nodes)
    if as_json:
        print(json.dumps(doc))
    else:
        print_sweep(_console(), doc, every_node=every_node)
    if done.sweep.unreadable:
        raise typer.Exit(1)


@fleet_app.command("status")
def fleet_status(
    watch: Annotated[
        bool, typer.Option("--watch", help="If a sweep is running, follow it to the end first.")
    ] = False,
    as_json: Json = False,
) -> None:
    """Conformance by pool and profile, drifted nodes by kind, the last sweep.

    With --watch and a sweep running, shows its progress (done/total) until it finishes, then
    the status; otherwise prints at once.
    """
    from lockstep_cli.fleet_progress import follow_sweep
    from lockstep_cli.fleet_views import print_status
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import FleetStatusAnswered, FleetStatusRequested

    settings = _settings()

    def status() -> FleetStatusAnswered:
        return ask(settings, INVENTORY, "fleet.status", FleetStatusRequested(), FleetStatusAnswered)

    result = follow_sweep(status, _console(), show=not as_json) if watch else status()
    doc = result.model_dump(mode="json")
    if as_json:
        print(json.dumps(doc))
    else:
        print_status(_console(), doc)


@fleet_app.command("show")
def fleet_show(
    node: Annotated[str, typer.Argument(help="Node id.")],
    as_json: Json = False,
) -> None:
    """One node: registry entry, latest report per source, pin, drift, recent history."""
    from lockstep_cli.fleet_views import print_show, show_json
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import FleetShowAnswered, FleetShowRequested

    request = _valid(lambda: FleetShowRequested(node_id=node))
    doc = show_json(ask(_settings(), INVENTORY, "fleet.show", request, FleetShowAnswered))
    if as_json:
        print(json.dumps(doc))
    else:
        print_show(_console(), doc)


@fleet_app.command("drift")
def fleet_drift(
    include_all: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every drifted node in full, nodes with only informational (unknown) items "
            "included, instead of the summary.",
        ),
    ] = False,
    as_json: Json = False,
) -> None:
    """Drift by kind and severity and the worst nodes; --all (or --json) every drifted node
    and each drifted component: kind, severity, expected vs actual."""
    from lockstep_cli.fleet_views import drift_json
    from lockstep_cli.ops_client import pages
    from lockstep_common.events.v1 import FleetDriftAnswered, FleetDriftRequested

    settings = _settings()
    doc = drift_json(
        pages(
            settings,
            INVENTORY,
            "fleet.drift",
            lambda after: FleetDriftRequested(include_informational=include_all, after=after),
            FleetDriftAnswered,
            lambda page: page.next_after,
        )
    )
    if as_json:
        print(json.dumps(doc))
    else:
        from lockstep_cli.fleet_views import print_drift

        print_drift(_console(), doc, settings.namespace, every_node=include_all)


@fleet_app.command("stragglers")
def fleet_stragglers(as_json: Json = False) -> None:
    """Nodes whose busbw or clocks are outliers against their profile's peers, outside any
    rollout (the healthgate's last evaluation per profile), and the component versions they
    share that their healthy peers do not (asked of the healthgate). Exit 0 none, 1 some, 3 no
    answer.
    """
    from lockstep_cli.fleet_views import print_stragglers
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import FleetStragglersAnswered, FleetStragglersRequested

    answer = ask(
        _settings(),
        "healthgate",
        "fleet.stragglers",
        FleetStragglersRequested(),
        FleetStragglersAnswered,
    )
    doc = [f.model_dump(mode="json") for f in answer.findings]
    if as_json:
        print(json.dumps(doc))
    else:
        print_stragglers(_console(), doc)
    if any(f["stragglers"] for f in doc):
        raise typer.Exit(1)


@fleet_app.command("pin")
def fleet_pin(
    scope: Annotated[
        str,
        typer.Option(
            help="Selector: site=S[,site=S2][,pool=P][,profile=X][,fabric_domain=D][,node=N]; "
            "at least one site."
        ),
    ],
    stack: Annotated[
        Path | None, typer.Option(help="YAML/JSON file {profile: {component: version}}.")
    ] = None,
    from_node: Annotated[
        str | None,
        typer.Option(
            "--from-node",
            help="Pin what this known-good node runs (its last sweep and agent report) "
            "instead of a --stack file.",
        ),
    ] = None,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save",
            help="Also write the stack pinned to this YAML file (to review it or keep it in git).",
        ),
    ] = None,
    rollout_id: Annotated[
        str | None, typer.Option("--rollout-id", help="Rollout that moves the pin.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each PubAck.")] = 5.0,
    allow_empty: Annotated[
        bool,
        typer.Option(
            "--allow-empty", help="Publish even when a site's scope selects no registered node."
        ),
    ] = False,
    as_json: Json = False,
) -> None:
    """Pin a scope to a golden stack: one pin.changed per site, each acknowledged by JetStream.

    The stack comes from --stack FILE, or from --from-node NODE: the versions a known-good node
    reported (refused when its BMC was never read or is unreadable, or it breaks a critical
    compatibility rule). Checked first, against the registry and the compatibility rules: every
    profile the stack names is known, and each site's scope selects at least one registered
    node (else --allow-empty). Prints the stack hash. Exit 0: every pin acknowledged; 1: a
    publish failed (the message says which sites were already published); 2: bad input (nothing
    is published).
    """
    from lockstep_cli.fleet_bus import (
        InputError,
        Unavailable,
        parse_stack,
        pins_for,
        publish_pins,
        stack_yaml,
    )
    from lockstep_common.fleet_file import NodeEntry
    from lockstep_common.scopes import SelectorError, parse_selector, selects

    settings = _settings()
    if (stack is None) == (from_node is None):
        fail("give the stack to pin: --stack FILE or --from-node NODE (one of them)")
    try:
        if stack is not None:
            parsed = parse_stack(stack.read_text(), str(stack))
        else:
            parsed = _stack_of_node(settings, str(from_node))
        selector = parse_selector(scope)
        stack_hash, messages = pins_for(settings.namespace, selector, parsed, rollout_id)
        if save is not None:
            save.write_text(stack_yaml(parsed))
    except OSError as exc:
        fail(f"{exc.filename or stack}: {exc.strerror or exc}")
    except SelectorError as exc:
        fail(f"--scope: {exc}")
    except InputError as exc:
        fail(str(exc))
    nodes = [NodeEntry.model_validate(n.model_dump()) for n in _registered_nodes()]
    known = _known_profiles(settings) | {n.profile for n in nodes}
    unknown = sorted(set(parsed) - known)
    if unknown:
        fail(
            f"{stack or from_node}: profile(s) {', '.join(unknown)} neither in the compatibility "
            f"rules nor registered (known: {', '.join(sorted(known))})"
        )
    empty = [
        m.site
        for m in messages
        if not any(selects(m.site, m.envelope.data.scope, n) for n in nodes)
    ]
    if empty and not allow_empty:
        fail(
            f"--scope {scope} selects no registered node in site(s) {', '.join(empty)}; "
            "nothing published (--allow-empty to pin them anyway)"
        )
    try:
        sites = run(publish_pins(settings.nats_access(), messages, timeout))
    except Unavailable as exc:
        fail(str(exc), 1)
    if as_json:
        ids = [str(m.envelope.event_id) for m in messages]
        print(json.dumps({"stack_hash": stack_hash, "sites": sites, "event_ids": ids}))
    else:
        _console().print(f"pinned {scope} to stack {stack_hash} ({len(sites)} site(s))")


def _stack_of_node(settings: OperatorSettings, node_id: str) -> dict[str, dict[Component, str]]:
    """The known-good node's stack, as the inventory judges it (``fleet.golden``); its refusal
    is one line naming --from-node (exit 2)."""
    from lockstep_cli.ops_client import ask
    from lockstep_common.events.v1 import FleetGoldenAnswered, FleetGoldenRequested

    request = _valid(lambda: FleetGoldenRequested(node_id=node_id), "--from-node")
    answer = ask(
        settings, INVENTORY, "fleet.golden", request, FleetGoldenAnswered, what="--from-node"
    )
    return {profile: dict(stack) for profile, stack in answer.stack.items()}


@fleet_app.command("admit")
def fleet_admit(
    stack_hash: Annotated[str, typer.Option("--stack-hash", help="The job's stack hash.")],
    nodes: Annotated[list[str], typer.Option("--nodes", help="Node ids: n1,n2 or repeat --nodes.")],
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the answer.", min=0.1)] = 5.0,
    as_json: Json = False,
) -> None:
    """May these nodes run a job that needs this stack? (the inventory's admission check)

    Exit codes: 0 every node admitted; 1 a node was refused (each reason printed); 2 bad input
    (hash not 64 lower-case hex, no nodes) or the service refused the request; 3 no answer
    within --timeout (NATS or the inventory service unavailable).
    """
    ids = [n.strip() for arg in nodes for n in arg.split(",") if n.strip()]
    doc = _admit_quickly(stack_hash, ids, timeout)
    if doc is None:  # something out of the ordinary: the full path checks and reports it
        doc = _admit(stack_hash, ids, timeout)
    if as_json:
        print(json.dumps(doc))
    elif sys.stdout.isatty():
        from lockstep_cli.fleet_views import print_admit

        print_admit(_console(), doc)
    else:
        from lockstep_cli.admit_quick import plain_lines

        print("\n".join(plain_lines(doc)))  # what print_admit writes to a pipe, without rich
    raise typer.Exit(0 if doc["admitted"] else 1)


def _admit_quickly(stack_hash: str, ids: list[str], timeout: float) -> dict[str, Any] | None:
    """The answer by the quick path (admit_quick.py), or None for the full path."""
    import datetime as dt
    import os

    from lockstep_cli import admit_quick, nats_request
    from lockstep_cli.cli_io import chosen_stack

    data_dir, verbose = chosen_stack()
    found = None if verbose else admit_quick.target(os.environ, data_dir)
    body = admit_quick.request_body(stack_hash, ids, now=dt.datetime.now(dt.UTC))
    if found is None or body is None:
        return None
    subject = found.subject
    try:
        reply = nats_request.request(found.access, subject, body, timeout, name="lockstep-cli")
        return admit_quick.answer_doc(reply.data, reply.headers.get("Lockstep-Error"))
    except admit_quick.ServiceRefused as exc:
        fail(str(exc))
    except admit_quick.BadReply as exc:
        fail(f"unexpected reply on {subject}: {exc}")
    except nats_request.AccessError as exc:
        fail(str(exc))
    except (nats_request.NoReply, nats_request.NoResponders) as exc:
        fail(
            f"no answer on {subject} within {timeout:g}s ({type(exc).__name__}): "
            "is the inventory service running?",
            3,
        )
    except (nats_request.Unreachable, nats_request.Refused, OSError) as exc:
        where = ",".join(found.access.servers)
        fail(f"NATS at {where} unreachable: {type(exc).__name__} {exc}", 3)


def _admit(stack_hash: str, ids: list[str], timeout: float) -> dict[str, Any]:
    """The answer by the full path: the inventory's settings, the models, nats-py."""
    from lockstep_cli.fleet_bus import InputError, Unavailable, admission_request, admit
    from lockstep_cli.fleet_views import admit_json

    settings = _settings()
    try:
        request = admission_request(stack_hash, ids)
        answer = run(admit(settings.nats_access(), settings.namespace, request, timeout))
    except InputError as exc:
        fail(str(exc))
    except Unavailable as exc:
        fail(str(exc), 3)
    return admit_json(answer)
