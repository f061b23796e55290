"""``lockstep fleet import`` over the bus (real NATS + PostgreSQL, the inventory running):
all or nothing, chunked to fit NATS's 1 MiB, each chunk idempotent by request id, recorded with
the identity that asked; hostile chunks and unusable credential references change nothing."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import (
    FleetChanged,
    FleetImportAnswered,
    FleetImportRequested,
    OpsRefused,
    RegisteredNode,
)
from lockstep_common.identities import CLI, READER

from .conftest import Harness, cli, harness

__all__ = ["harness"]

pytestmark = pytest.mark.integration
FLEET_SIZE = 12_500


def node(i: int, **change: Any) -> dict[str, Any]:
    return {
        "id": f"n{i:05d}",
        "bmc_url": f"http://127.9.{i // 250}.{i % 250}:8000",
        "profile": "gb200",
        "site": "iad1",
        "pool": "train-a",
        "credentials": "env:LOCKSTEP_BMC",
        **change,
    }


async def imported(h: Harness) -> dict[str, dict[str, Any]]:
    """The registry's entries of the nodes these tests import (n00000, n00001, ...)."""
    rows = await h.app.require().pool.fetch(
        "SELECT * FROM nodes WHERE id ~ '^n[0-9]+$' ORDER BY id"
    )
    return {r["id"]: dict(r) for r in rows}


async def audit(h: Harness, command: str = "fleet.import") -> list[tuple[str, str]]:
    rows = await h.app.require().pool.fetch(
        "SELECT identity, outcome FROM operator_requests WHERE command = $1 ORDER BY asked_at",
        command,
    )
    return [(r["identity"], r["outcome"]) for r in rows]


async def ask_raw(h: Harness, body: bytes, identity: str = CLI) -> Any:
    subject = h.ns.wire(subjects.ops_request(identity, "inventory", "fleet.import"))
    return await h.nc.request(subject, body, timeout=30)


async def ask(h: Harness, request: EventData, identity: str = CLI) -> EventData:
    reply = await ask_raw(h, make_envelope(request, source="/t").to_json(), identity)
    return REGISTRY.decode(reply.data, max_bytes=1 << 22).data


def chunk(import_id: uuid.UUID, number: int, chunks: int, *nodes: dict[str, Any]) -> Any:
    return FleetImportRequested(
        import_id=import_id,
        chunk=number,
        chunks=chunks,
        nodes=tuple(RegisteredNode.model_validate(n) for n in nodes),
    )


async def test_import_adds_then_updates_and_is_idempotent(
    env: None, harness: Harness, tmp_path: Path
) -> None:
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": [node(1), node(2)]}))
    assert await cli("fleet", "import", str(fleet), "--json") == (
        0,
        '{"nodes": 2, "added": 2, "updated": 0, "unchanged": 0}\n',
    )
    code, out = await cli("fleet", "import", str(fleet), "--json")
    assert out.startswith('{"nodes": 2, "added": 0, "updated": 0, "unchanged": 2}')
    fleet.write_text(json.dumps({"nodes": [node(1, pool="train-b"), node(2), node(3)]}))
    code, out = await cli("fleet", "import", str(fleet))
    assert (code, out) == (0, "imported 3 node(s): 1 added, 1 updated, 1 unchanged\n")
    listed = await imported(harness)
    assert list(listed) == ["n00001", "n00002", "n00003"]
    assert listed["n00001"]["pool"] == "train-b"
    assert listed["n00001"]["credentials"] == "env:LOCKSTEP_BMC"
    # Plain http for a BMC's credentials only where its entry says so; off unless it does.
    fleet.write_text(json.dumps([node(1, pool="train-b"), node(2, allow_plain_http=True)]))
    code, out = await cli("fleet", "import", str(fleet), "--json")
    assert '"updated": 1, "unchanged": 1' in out
    listed = await imported(harness)
    assert [n["allow_plain_http"] for n in listed.values()] == [False, True, False]
    # Recorded with the identity that asked, one row per chunk.
    assert await audit(harness) == [(CLI, "done")] * 4


async def test_a_secret_in_the_file_changes_nothing(
    env: None, harness: Harness, tmp_path: Path
) -> None:
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps([node(1)]))
    assert (await cli("fleet", "import", str(fleet)))[0] == 0
    fleet.write_text(json.dumps([node(1, pool="changed"), node(2, password="hunter2")]))
    code, out = await cli("fleet", "import", str(fleet))
    assert code == 2 and "carries a username/password" in out and "hunter2" not in out
    assert [(i, n["pool"]) for i, n in (await imported(harness)).items()] == [("n00001", "train-a")]


async def test_a_12500_node_fleet_is_imported_in_chunks_all_at_once(
    env: None, harness: Harness, tmp_path: Path
) -> None:
    """The file is about 1.8 MB of JSON: more than one NATS message may carry (1 MiB)."""
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": [node(i) for i in range(FLEET_SIZE)]}))
    assert fleet.stat().st_size > 1 << 20
    code, out = await cli("fleet", "import", str(fleet), "--json")
    assert code == 0, out
    assert json.loads(out) == {
        "nodes": FLEET_SIZE,
        "added": FLEET_SIZE,
        "updated": 0,
        "unchanged": 0,
    }
    assert len(await imported(harness)) == FLEET_SIZE
    chunks = len(await audit(harness))
    assert chunks >= 25  # at most 500 nodes a request
    # Again with one node changed: one update, the rest unchanged.
    doc = [node(i) for i in range(FLEET_SIZE)]
    doc[FLEET_SIZE - 1]["pool"] = "train-z"
    fleet.write_text(json.dumps(doc))
    code, out = await cli("fleet", "import", str(fleet), "--json")
    assert json.loads(out) == {
        "nodes": FLEET_SIZE,
        "added": 0,
        "updated": 1,
        "unchanged": FLEET_SIZE - 1,
    }
    # Nothing is staged once an import committed.
    assert await harness.app.require().pool.fetchval("SELECT count(*) FROM import_chunks") == 0


async def test_nothing_is_written_until_the_last_chunk_and_a_retried_chunk_counts_once(
    harness: Harness,
) -> None:
    import_id = uuid.uuid4()
    first = make_envelope(chunk(import_id, 0, 2, node(1), node(2)), source="/t").to_json()
    reply = await ask_raw(harness, first)
    staged = REGISTRY.decode(reply.data, max_bytes=1 << 20).data
    assert isinstance(staged, FleetImportAnswered)
    assert (staged.staged, staged.chunks, staged.committed) == (1, 2, False)
    assert await imported(harness) == {}  # staged, not in the registry
    # The same request again (its id): the first reply, byte for byte; nothing more staged.
    again = await ask_raw(harness, first)
    assert again.data == reply.data
    # The same chunk under a new request id: the import's progress, nothing changed.
    copy = await ask(harness, chunk(import_id, 0, 2, node(1), node(2)))
    assert isinstance(copy, FleetImportAnswered) and copy.staged == 1 and not copy.committed
    # The same chunk number with other nodes, another chunk count, a node of another chunk:
    # refused, nothing changed.
    for hostile, says in (
        (chunk(import_id, 0, 2, node(1, pool="evil")), "was staged with other nodes"),
        (chunk(import_id, 1, 3, node(3)), "has 2 chunks, not 3"),
        (chunk(import_id, 1, 2, node(2, pool="evil")), "n00002 already in chunk 0"),
    ):
        refused = await ask(harness, hostile)
        assert isinstance(refused, OpsRefused) and refused.kind == "conflict", refused
        assert says in refused.reason
    assert await imported(harness) == {}
    done = await ask(harness, chunk(import_id, 1, 2, node(3)))
    assert isinstance(done, FleetImportAnswered) and done.committed
    assert (done.nodes, done.added, done.updated, done.unchanged) == (3, 3, 0, 0)
    assert list(await imported(harness)) == ["n00001", "n00002", "n00003"]
    # A late copy of a chunk of the committed import changes nothing twice.
    late = await ask(harness, chunk(import_id, 0, 2, node(1, pool="late")))
    assert isinstance(late, OpsRefused) and late.kind == "conflict"
    assert "already committed" in late.reason
    assert (await imported(harness))["n00001"]["pool"] == "train-a"
    assert (await ask_raw(harness, first)).data == reply.data  # its first reply still


async def test_hostile_chunks_are_refused_and_change_nothing(harness: Harness) -> None:
    import_id = uuid.uuid4()
    cases: list[tuple[bytes, str, str]] = [
        # A secret where a reference belongs: the service checks, whatever the CLI did.
        (
            make_envelope(
                chunk(import_id, 0, 1, node(1, credentials="env:hunter2")), source="/t"
            ).to_json(),
            "invalid",
            "credentials",
        ),
        (
            make_envelope(chunk(import_id, 0, 1, node(1, profile="gb300")), source="/t").to_json(),
            "invalid",
            "profile 'gb300' is not in the compatibility rules",
        ),
        (
            make_envelope(chunk(import_id, 0, 1, node(1), node(1)), source="/t").to_json(),
            "invalid",
            "appears twice",
        ),
    ]
    body = json.loads(make_envelope(chunk(import_id, 0, 1, node(1)), source="/t").to_json())
    body["data"]["chunk"] = 1  # a chunk past the import's last
    cases.append((json.dumps(body).encode(), "invalid", "chunks count from 0"))
    body["data"]["chunk"] = 0
    body["data"]["nodes"] = [node(i) for i in range(501)]  # more than one chunk may hold
    cases.append((json.dumps(body).encode(), "invalid", "nodes"))
    body["data"]["nodes"] = [node(1, id="a.b")]  # a node id no subject token can be
    cases.append((json.dumps(body).encode(), "invalid", "id"))
    for payload, kind, says in cases:
        reply = await ask_raw(harness, payload)
        refused = REGISTRY.decode(reply.data, max_bytes=1 << 20).data
        assert isinstance(refused, OpsRefused) and refused.kind == kind, (says, refused)
        assert says in refused.reason, (says, refused.reason)
        assert "hunter2" not in refused.reason
    # The reader identity may not import.
    refused = await ask(harness, chunk(uuid.uuid4(), 0, 1, node(1)), READER)
    assert isinstance(refused, OpsRefused) and refused.kind == "forbidden"
    assert await imported(harness) == {}
    assert await harness.app.require().pool.fetchval("SELECT count(*) FROM import_chunks") == 0
    assert (READER, "refused") in await audit(harness)


@pytest.mark.parametrize("case", ["missing", "directory", "group-readable", "not-json"])
async def test_an_unusable_credentials_file_is_refused_in_one_line(
    env: None, harness: Harness, tmp_path: Path, case: str
) -> None:
    """Issue 31: ``--credentials file:X`` re-pointed every node at a missing file, a directory
    or a 0644 file, exit 0; the next sweep found every BMC unreadable."""
    fleet = tmp_path / "fleet.json"
    fleet.write_text(
        json.dumps([{k: v for k, v in node(i).items() if k != "credentials"} for i in range(48)])
    )
    creds = tmp_path / "bmc.json"
    if case == "directory":
        creds.mkdir()
    elif case != "missing":
        creds.write_text(
            "{not json" if case == "not-json" else '{"default": {"username": "u", "password": "p"}}'
        )
        creds.chmod(0o644 if case == "group-readable" else 0o600)
    says = {
        "missing": "no such file",
        "directory": "is a directory",
        "group-readable": "group or others may read it (mode 0644)",
        "not-json": "not valid JSON",
    }[case]
    code, out = await cli("fleet", "import", str(fleet), "--credentials", f"file:{creds}")
    assert code == 2, out
    assert out.count("\n") == 1 and says in out and "Traceback" not in out
    assert "(nodes[0] (n00000) and 47 other node(s))" in out
    assert await imported(harness) == {}
    # Fixed: the same import goes through.
    if case in {"missing", "group-readable"}:
        creds.unlink(missing_ok=True)
        creds.write_text('{"default": {"username": "u", "password": "p"}}')
        creds.chmod(0o600)
        code, out = await cli("fleet", "import", str(fleet), "--credentials", f"file:{creds}")
        assert code == 0 and "48 added" in out, out


async def test_chunks_of_an_import_never_finished_are_dropped_after_a_day(
    harness: Harness,
) -> None:
    pool = harness.app.require().pool
    abandoned = uuid.uuid4()
    staged = await ask(harness, chunk(abandoned, 0, 2, node(1)))
    assert isinstance(staged, FleetImportAnswered) and not staged.committed
    await pool.execute(
        "UPDATE import_chunks SET staged_at = now() - interval '25 hours' WHERE import_id = $1",
        abandoned,
    )
    done = await ask(harness, chunk(uuid.uuid4(), 0, 1, node(2)))
    assert isinstance(done, FleetImportAnswered) and done.committed
    assert await pool.fetchval("SELECT count(*) FROM import_chunks") == 0
    assert list(await imported(harness)) == ["n00002"]
    # Its last chunk, late: the import is gone, so it stages anew and commits nothing.
    late = await ask(harness, chunk(abandoned, 1, 2, node(3)))
    assert isinstance(late, FleetImportAnswered) and not late.committed and late.staged == 1
    assert list(await imported(harness)) == ["n00002"]


async def test_each_registry_change_is_announced_with_its_new_version(
    env: None, harness: Harness, tmp_path: Path
) -> None:
    """Issue 28 item 3: the updater serves a wave's steps from its copy of the wave's nodes
    and reads one anew when the inventory announces its entry changed (``fleet.changed``): an
    import announces what it added or changed, never what it left as it was, and a removal
    announces the nodes removed, each with a version greater than any copy could hold."""
    heard: list[dict[str, int]] = []

    async def on_message(msg: Any) -> None:
        event = REGISTRY.decode(msg.data, max_bytes=1 << 20).data
        assert isinstance(event, FleetChanged)
        heard.append({n.node_id: n.version for n in event.nodes})

    sub = await harness.nc.subscribe(harness.ns.wire(subjects.fleet_changed()), cb=on_message)

    async def announcements(count: int) -> list[dict[str, int]]:
        async def arrived() -> list[dict[str, int]] | None:
            return heard if len(heard) >= count else None

        return await until(arrived, what=f"{count} fleet.changed")

    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": [node(1), node(2)]}))
    assert (await cli("fleet", "import", str(fleet)))[0] == 0
    (first,) = await announcements(1)
    listed = await imported(harness)
    assert first == {n: listed[n]["version"] for n in ("n00001", "n00002")}
    assert (await cli("fleet", "import", str(fleet)))[0] == 0  # unchanged: nothing announced
    fleet.write_text(json.dumps({"nodes": [node(1, bmc_url="https://moved:8443"), node(2)]}))
    assert (await cli("fleet", "import", str(fleet)))[0] == 0
    _, second = await announcements(2)
    assert list(second) == ["n00001"] and second["n00001"] > first["n00001"]
    assert second["n00001"] == (await imported(harness))["n00001"]["version"]
    assert (await cli("fleet", "remove", "n00002"))[0] == 0
    *_, removed = await announcements(3)
    assert list(removed) == ["n00002"] and removed["n00002"] > second["n00001"]
    await sub.unsubscribe()
    assert len(heard) == 3
