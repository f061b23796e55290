"""``lockstep fleet import`` into a real PostgreSQL: all or nothing, idempotent."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app

pytestmark = pytest.mark.integration


def node(i: int, **change: Any) -> dict[str, Any]:
    return {
        "id": f"n{i:03d}",
        "bmc_url": f"http://127.9.0.{i}:8000",
        "profile": "gb200",
        "site": "iad1",
        "pool": "train-a",
        "credentials": "env:LOCKSTEP_BMC",
        **change,
    }


@pytest.fixture
def env(servers: Any, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", servers.database_url)
    monkeypatch.setenv("LOCKSTEP_INVENTORY_DB_SCHEMA", f"{namespace}_inventory")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def registry() -> list[dict[str, Any]]:
    """The registry as imported, read from the inventory's tables (``fleet list`` asks the
    running service, which these tests do not start)."""
    from lockstep_inventory.admin import fleet
    from lockstep_inventory.settings import Settings

    return [n.model_dump() for n in asyncio.run(fleet(Settings()))]


def test_import_adds_then_updates_and_is_idempotent(env: None, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"nodes": [node(1), node(2)]}))
    assert run("fleet", "import", str(fleet), "--json") == (
        0,
        '{"nodes": 2, "added": 2, "updated": 0, "unchanged": 0}\n',
    )
    assert run("fleet", "import", str(fleet), "--json")[1].startswith(
        '{"nodes": 2, "added": 0, "updated": 0, "unchanged": 2}'
    )
    fleet.write_text(json.dumps({"nodes": [node(1, pool="train-b"), node(2), node(3)]}))
    assert (
        '"added": 1, "updated": 1, "unchanged": 1'
        in run("fleet", "import", str(fleet), "--json")[1]
    )
    listed = registry()
    assert [n["id"] for n in listed] == ["n001", "n002", "n003"]
    assert listed[0]["pool"] == "train-b" and listed[0]["credentials"] == "env:LOCKSTEP_BMC"
    # Plain http for a BMC's credentials only where its entry says so; off unless it does.
    fleet.write_text(json.dumps([node(1, pool="train-b"), node(2, allow_plain_http=True)]))
    assert '"updated": 1, "unchanged": 1' in run("fleet", "import", str(fleet), "--json")[1]
    listed = registry()
    assert [n["allow_plain_http"] for n in listed] == [False, True, False]


def test_one_bad_node_changes_nothing(env: None, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps([node(1)]))
    assert run("fleet", "import", str(fleet))[0] == 0
    fleet.write_text(json.dumps([node(1, pool="changed"), node(2, password="hunter2")]))
    code, out = run("fleet", "import", str(fleet))
    assert code == 2 and "carries a username/password" in out and "hunter2" not in out
    listed = registry()
    assert [(n["id"], n["pool"]) for n in listed] == [("n001", "train-a")]
