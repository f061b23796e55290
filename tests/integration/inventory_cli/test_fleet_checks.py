"""Inputs are validated before anything changes: read commands never create or migrate a
schema, a fleet file's every bad node is named (unknown profiles too), a stack's profiles must
be known, and ``fleet remove`` undoes an import, all or nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from .conftest import Harness, cli, cli_json, harness

__all__ = ["harness"]

pytestmark = pytest.mark.integration


def node(node_id: str, profile: str = "gb200", site: str = "s1") -> str:
    return (
        f"- {{id: {node_id}, bmc_url: 'https://127.0.0.1:1', profile: {profile}, site: {site},"
        " credentials: 'env:LOCKSTEP_TESTBMC'}\n"
    )


async def schema_exists(servers: Any, schema: str) -> bool:
    conn = await asyncpg.connect(servers.database_url)
    try:
        return bool(
            await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema)
        )
    finally:
        await conn.close()


async def test_read_commands_never_create_the_schema(
    env: None, servers: Any, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = f"{namespace}_nosuch"
    monkeypatch.setenv("LOCKSTEP_INVENTORY_DB_SCHEMA", schema)
    # The commands the inventory answers over the bus: no service, one line saying so (exit 3).
    for command in (["status"], ["list"], ["drift"], ["show", "n1"], ["remove", "n1"], ["sweep"]):
        code, out = await cli("fleet", *command)
        assert code == 3, (command, out)
        assert f"ops.cli.inventory.fleet.{command[0]}: is the inventory service running?" in out
        assert out.count("\n") == 1 and "Traceback" not in out
    assert not await schema_exists(servers, schema)


async def test_import_names_every_bad_node_and_unknown_profiles(
    env: None, harness: Harness, tmp_path: Path
) -> None:
    """The file's own faults are named here, all of them, before anything is sent; the
    profiles the inventory's rules do not know, by the inventory (``harness`` runs it)."""
    before = await harness.app.require().pool.fetchval("SELECT count(*) FROM nodes")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "nodes:\n"
        + node("ok-1")
        + node("bad-1", profile="gb300")
        + node("bad 2")
        + node("ok-1", profile="hgx-h100")
    )
    code, out = await cli("fleet", "import", str(fleet))
    assert code == 2
    lines = out.strip().splitlines()
    assert lines[0] == f"error: {fleet}: 2 invalid nodes, nothing imported:"
    assert lines[1].startswith("  nodes[2] (bad 2): id:")
    assert lines[2] == "  nodes[3]: node id 'ok-1' appears twice"
    fleet.write_text("nodes:\n" + node("ok-1") + node("bad-1", profile="gb300") + node("gb-9"))
    code, out = await cli("fleet", "import", str(fleet))
    assert code == 2 and out.count("\n") == 1, out
    assert out.startswith(f"error: {fleet}: nothing imported: nodes[1] (bad-1): profile 'gb300'")
    assert "known: gb200, hgx-h100" in out
    assert await harness.app.require().pool.fetchval("SELECT count(*) FROM nodes") == before


async def test_remove_undoes_an_import_all_or_nothing(
    env: None, harness: Harness, tmp_path: Path
) -> None:
    """``fleet remove`` is the inventory's (asked over the bus, ``harness`` runs it)."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("nodes:\n" + node("n1") + node("n2") + node("n3"))
    assert (await cli("fleet", "import", str(fleet)))[0] == 0

    async def imported() -> list[str]:
        return [n["id"] for n in await cli_json("fleet", "list") if n["id"] in {"n1", "n2", "n3"}]

    code, out = await cli("fleet", "remove", "n1", "nope", "n2", "nope-2")
    assert code == 2
    assert out == "error: not in the registry, nothing removed: nope, nope-2\n"
    assert await imported() == ["n1", "n2", "n3"]
    code, out = await cli("fleet", "remove", "n1", "n2")
    assert code == 0 and "removed 2 node(s)" in out
    assert await imported() == ["n3"]


async def test_pin_refuses_unknown_profiles_and_empty_scopes(
    env: None, harness: Harness, tmp_path: Path
) -> None:
    """The registry it checks against is the inventory's (``fleet.list``, ``harness`` runs it)."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("nodes:\n" + node("n1"))
    assert (await cli("fleet", "import", str(fleet)))[0] == 0
    stack = tmp_path / "stack.yaml"
    stack.write_text("gb300:\n  bios: '1.0'\ngb200:\n  bios: '1.0'\n")
    code, out = await cli("fleet", "pin", "--scope", "site=s1", "--stack", str(stack))
    assert code == 2
    assert "profile(s) gb300 neither in the compatibility rules nor registered" in out
    stack.write_text("gb200:\n  bios: '1.0'\n")
    code, out = await cli("fleet", "pin", "--scope", "site=s1,site=s2", "--stack", str(stack))
    assert code == 2
    assert "selects no registered node in site(s) s2; nothing published" in out
