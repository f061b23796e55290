"""``lockstep agent enroll|revoke``: what an operator types is checked first; bad input is one
line, a non-zero exit and nothing written (issue 26, item 1)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import nkeys  # type: ignore[import-untyped]
import pytest
from typer.testing import CliRunner

from lockstep_cli import agent_cli
from lockstep_cli.main import app
from lockstep_devstack import agents

FLEET = {"node-1": "site-a", "node-2": "site-b"}


@pytest.fixture
def fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inventory's answer to ``fleet.query``, without a running stack."""
    monkeypatch.setattr(agent_cli, "fleet_sites", lambda data_dir: dict(FLEET))


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize("bad", ["node.1", "*", ">", "node 1", "node\n", "x" * 65])
def test_a_name_that_is_no_node_id_is_one_line_and_nothing_is_written(
    tmp_path: Path, fleet: None, bad: str
) -> None:
    code, out = invoke("agent", "enroll", "--data-dir", str(tmp_path), "node-1", bad)
    assert code == 2
    assert len(out.strip().splitlines()) == 1 and "cannot be a NATS subject token" in out
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_node_is_one_line_and_nothing_is_written(tmp_path: Path, fleet: None) -> None:
    code, out = invoke("agent", "enroll", "--data-dir", str(tmp_path), "node-1", "node-9")
    assert code == 2
    assert len(out.strip().splitlines()) == 1 and "unknown node(s) node-9" in out
    assert list(tmp_path.iterdir()) == []


def test_enrolment_writes_one_private_seed_per_node_and_records_only_public_keys(
    tmp_path: Path, fleet: None
) -> None:
    code, out = invoke("agent", "enroll", "--data-dir", str(tmp_path), "node-1", "node-2")
    assert code == 0, out
    record = json.loads((tmp_path / agents.RECORD).read_text())
    assert {n: e["site"] for n, e in record.items()} == FLEET
    seeds = agents.seed_dir(tmp_path)
    assert stat.S_IMODE(seeds.stat().st_mode) == 0o700
    for node, entry in record.items():
        seed = agents.seed_path(seeds, node)
        assert stat.S_IMODE(seed.stat().st_mode) == 0o600
        pair = nkeys.from_seed(bytearray(seed.read_bytes().strip()))
        assert pair.public_key.decode() == entry["nkey"]
        assert seed.read_text().strip() not in (tmp_path / agents.RECORD).read_text()
        assert seed.read_text().strip() not in out  # never printed
    # Enrolled again: a new key, the old one no longer recorded.
    old = record["node-1"]["nkey"]
    assert invoke("agent", "enroll", "--data-dir", str(tmp_path), "node-1")[0] == 0
    assert json.loads((tmp_path / agents.RECORD).read_text())["node-1"]["nkey"] != old


def test_revoking_a_node_not_enrolled_is_one_line_and_changes_nothing(
    tmp_path: Path, fleet: None
) -> None:
    assert invoke("agent", "enroll", "--data-dir", str(tmp_path), "node-1")[0] == 0
    before = (tmp_path / agents.RECORD).read_text()
    code, out = invoke("agent", "revoke", "--data-dir", str(tmp_path), "node-1", "node-2")
    assert code == 2
    assert len(out.strip().splitlines()) == 1 and "not enrolled: node-2" in out
    assert (tmp_path / agents.RECORD).read_text() == before
    assert agents.seed_path(agents.seed_dir(tmp_path), "node-1").exists()
    code, out = invoke("agent", "revoke", "--data-dir", str(tmp_path), "node-1")
    assert code == 0, out
    assert agents.load(tmp_path) == {}
    assert not agents.seed_path(agents.seed_dir(tmp_path), "node-1").exists()


def test_all_enrols_every_node_of_the_fleet_and_nodes_or_all_is_required(
    tmp_path: Path, fleet: None
) -> None:
    for args in ([], ["--all", "node-1"]):
        code, out = invoke("agent", "enroll", "--data-dir", str(tmp_path), *args)
        assert code == 2 and "name the nodes to enrol, or --all" in out
        assert list(tmp_path.iterdir()) == []
    code, out = invoke("agent", "enroll", "--data-dir", str(tmp_path), "--all")
    assert code == 0, out
    assert set(agents.load(tmp_path)) == set(FLEET)
