"""``fleet.import``: a fleet file sent in chunks by ``lockstep fleet import``, written all or
nothing (a 12,500-node file does not fit one NATS message).

The contract, each chunk in the transaction that records it (``lockstep_common.operator``: a
chunk retried with its request id gets its first reply and changes nothing twice; who asked is
recorded, and the ``reader`` is refused):

- **Validated on arrival, never trusted**: every node of a chunk is checked as a fleet file's
  node is (``NodeEntry``: references, never secrets), against the profiles of this service's
  compatibility rules, and each ``file:`` credential reference must be usable *here*, where
  the sweeps read it (``reference_problem``: a missing file, a directory, a file group or
  others may read). A bad chunk is refused naming every bad node by its index in the file;
  nothing of it is staged.
- **Staged, then committed at once**: a chunk is kept under ``(import_id, chunk)``; when the
  last missing one arrives, every node of the import is added or updated in the same
  transaction and the reply says how many were added, updated and unchanged. Until then
  nothing of the import is in the registry.
- **Copies and contradictions**: a chunk staged before, again with the same nodes, changes
  nothing and gets the import's progress; with other nodes, another chunk count than the
  import's, a node id another chunk holds, or any chunk of an import already committed, it
  is refused (``conflict``) and nothing changes. Chunks of an import never finished are dropped
  after a day.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from pydantic import ValidationError

from lockstep_common.compatibility.rules import CompatibilityRules
from lockstep_common.db import Conn
from lockstep_common.events.v1 import FleetImportAnswered, FleetImportRequested
from lockstep_common.operator import Asker, Command, Refusal
from lockstep_inventory.adapters import imports, registry
from lockstep_inventory.adapters.announce import Announce, unannounced
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_redfish.credentials import reference_problem

ProblemOf = Callable[[str], str | None]


def check_chunk(
    request: FleetImportRequested,
    known_profiles: Collection[str],
    problem_of: ProblemOf = reference_problem,
) -> tuple[tuple[NodeEntry, ...], list[str]]:
    """The chunk's nodes, and one line per bad node (every one of them)."""
    nodes: list[NodeEntry] = []
    problems: list[str] = []
    seen: set[str] = set()
    referring: dict[str, list[str]] = {}  # credential reference -> the nodes naming it
    for offset, sent in enumerate(request.nodes):
        where = f"nodes[{request.first_index + offset}] ({sent.id})"
        try:
            node = NodeEntry.model_validate(sent.model_dump())
        except ValidationError as exc:
            fields = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            problems.append(f"{where}: {fields}")
            continue
        if node.id in seen:
            problems.append(f"{where}: node id {node.id!r} appears twice")
        elif node.profile not in known_profiles:
            problems.append(
                f"{where}: profile {node.profile!r} is not in the compatibility rules (known: "
                f"{', '.join(sorted(known_profiles))})"
            )
        referring.setdefault(node.credentials, []).append(where)
        seen.add(node.id)
        nodes.append(node)
    for reference, wheres in referring.items():
        # Once per reference, not once per node: 48 nodes of one bad file are one line.
        problem = problem_of(reference)
        if problem is not None:
            others = f" and {len(wheres) - 1} other node(s)" if len(wheres) > 1 else ""
            problems.append(f"credentials {problem} ({wheres[0]}{others})")
    return tuple(nodes), problems


def import_command(
    rules: CompatibilityRules,
    problem_of: ProblemOf = reference_problem,
    announce: Announce = unannounced,
) -> Command[FleetImportRequested]:
    """``fleet.import`` judged by the service's rules and credential checks; each node it adds
    or changes is announced (``adapters.announce``) as the import commits."""
    known = frozenset(rules.profile_architecture)

    async def fleet_import(
        conn: Conn, request: FleetImportRequested, asker: Asker
    ) -> FleetImportAnswered:
        nodes, problems = check_chunk(request, known, problem_of)
        if problems:
            shown = "; ".join(problems[:20])
            more = f"; and {len(problems) - 20} more" if len(problems) > 20 else ""
            raise Refusal("invalid", f"nothing imported: {shown}{more}")
        await imports.lock(conn, request.import_id)
        if await imports.committed(conn, request.import_id):
            raise Refusal("conflict", f"import {request.import_id} was already committed")
        await imports.drop_abandoned(conn, asker.now)
        counts = await imports.chunk_counts(conn, request.import_id)
        await _check_agrees(conn, request, nodes, counts)
        if request.chunk not in counts:
            await imports.stage(conn, request.import_id, request.chunk, request.chunks, nodes)
            counts[request.chunk] = request.chunks
        if len(counts) < request.chunks:
            return FleetImportAnswered(
                import_id=request.import_id,
                staged=len(counts),
                chunks=request.chunks,
                committed=False,
            )
        every = await imports.every_node(conn, request.import_id)
        result = await registry.import_nodes(conn, every)
        await imports.record(conn, request.import_id, asker.identity, request.chunks, result)
        await announce(result.versions)
        return FleetImportAnswered(
            import_id=request.import_id,
            staged=len(counts),
            chunks=request.chunks,
            committed=True,
            nodes=len(every),
            added=result.added,
            updated=result.updated,
            unchanged=result.unchanged,
        )

    return Command(
        "fleet.import", FleetImportRequested, FleetImportAnswered, fleet_import, writes=True
    )


async def _check_agrees(
    conn: Conn,
    request: FleetImportRequested,
    nodes: tuple[NodeEntry, ...],
    counts: dict[int, int],
) -> None:
    """Refuse a chunk that contradicts what its import already holds."""
    other = next((c for c in counts.values() if c != request.chunks), None)
    if other is not None:
        raise Refusal(
            "conflict", f"import {request.import_id} has {other} chunks, not {request.chunks}"
        )
    if request.chunk in counts:
        if await imports.chunk_nodes(conn, request.import_id, request.chunk) != nodes:
            raise Refusal(
                "conflict",
                f"chunk {request.chunk} of import {request.import_id} was staged with other "
                "nodes; nothing changed",
            )
        return
    held = await imports.held_elsewhere(
        conn, request.import_id, request.chunk, [n.id for n in nodes]
    )
    if held:
        first = min(held)
        raise Refusal(
            "conflict",
            f"node(s) {', '.join(sorted(held)[:10])} already in chunk {held[first]} of import "
            f"{request.import_id}; nothing changed",
        )
