"""``lockstep approver keygen``: a key pair the planner's trust store loads and whose
signature ``rollout approve`` makes and the planner counts."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app
from lockstep_cli.rollout_cli import _signed
from lockstep_planner.adapters.approvers import load_approvers
from lockstep_planner.domain.approvals import Approval, refusal

PLAN = "ab" * 32


def keygen(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["approver", "keygen", *args])
    return result.exit_code, result.output


def test_the_public_key_goes_in_the_trust_store_and_the_private_key_signs_approvals(
    tmp_path: Path,
) -> None:
    keys = tmp_path / "alice-keys"
    code, out = keygen("alice", "--out", str(keys))
    assert code == 0, out
    assert "LOCKSTEP_PLANNER_APPROVERS_DIR" in out and "--as alice" in out
    assert stat.S_IMODE((keys / "alice.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    approvers = tmp_path / "approvers"
    approvers.mkdir()
    (approvers / "alice.pem").write_bytes((keys / "alice.pem").read_bytes())
    trust = load_approvers(approvers)
    assert list(trust) == ["alice"]
    approval = Approval(**json.loads(_signed(keys / "alice.key", "alice", "r-1", PLAN)))
    assert refusal(approval, rollout_id="r-1", plan_hash=PLAN, keys=trust, seen=()) is None


def test_an_existing_key_is_never_overwritten(tmp_path: Path) -> None:
    assert keygen("alice", "--out", str(tmp_path))[0] == 0
    before = (tmp_path / "alice.key").read_bytes()
    code, out = keygen("alice", "--out", str(tmp_path))
    assert code == 2 and "exists: nothing written" in out
    assert (tmp_path / "alice.key").read_bytes() == before


@pytest.mark.parametrize("name", ["../evil", ".hidden", "a b", "", "x" * 65])
def test_a_name_that_is_no_plain_token_is_refused(tmp_path: Path, name: str) -> None:
    code, out = keygen(name, "--out", str(tmp_path))
    assert code == 2 and "approver name" in out and "Traceback" not in out
    assert list(tmp_path.iterdir()) == []
