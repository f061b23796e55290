"""``lockstep fleet import|list|status|show|drift|remove|sweep|pin`` ask the inventory over the
bus: they work with no database reachable at all (issue 26, item 3: the CLI holds no database
credentials)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import SITE, Harness, cli, cli_json, harness

pytestmark = pytest.mark.integration
__all__ = ["harness"]


async def test_the_moved_commands_need_no_database(
    env: None, harness: Harness, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    await harness.sweep()
    # Port 1 on loopback: nothing listens there. A command that touched the database would
    # fail naming it.
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    ids = sorted(n.id for n in harness.nodes)
    listed = await cli_json("fleet", "list")
    assert [n["id"] for n in listed] == ids
    assert listed[0]["credentials"] == "env:LOCKSTEP_TESTBMC"
    status = await cli_json("fleet", "status")
    assert status["fleet"]["nodes"] == len(ids) and status["sweep"]["done"] == len(ids)
    shown = await cli_json("fleet", "show", ids[0])
    assert shown["node"]["id"] == ids[0] and shown["observations"]["redfish"]["readable"]
    assert await cli_json("fleet", "drift") == []
    code, out = await cli("fleet", "show", "bad node")
    assert code == 2 and out.count("\n") == 1 and "node_id" in out
    # A pin checks the registry and takes a known-good node's stack from the inventory too.
    pinned = await cli_json("fleet", "pin", "--scope", f"site={SITE}", "--from-node", ids[1])
    assert pinned["sites"] == [SITE]
    code, out = await cli("fleet", "pin", "--scope", f"site={SITE}", "--from-node", "nope-9")
    assert code == 2 and out.startswith("error: --from-node: node nope-9 is not registered"), out
    code, out = await cli("fleet", "remove", ids[0])
    assert code == 0 and "removed 1 node(s)" in out
    assert [n["id"] for n in await cli_json("fleet", "list")] == ids[1:]
    rows = await harness.app.require().pool.fetch("SELECT identity, command FROM operator_requests")
    assert [(r["identity"], r["command"]) for r in rows] == [("cli", "fleet.remove")]
    # The import and the sweep too: the inventory writes and reads its BMCs.
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps([harness.nodes[0].model_dump()]))
    code, out = await cli("fleet", "import", str(fleet))
    assert (code, out) == (0, "imported 1 node(s): 1 added, 0 updated, 0 unchanged\n")
    swept = await cli_json("fleet", "sweep")
    assert sorted(n["id"] for n in swept["nodes"]) == ids and swept["sweep"]["unreadable"] == 0
