"""``lockstep pool set|show`` against a running planner (real NATS + PostgreSQL): windows set
through the bus, audited with who set them, announced to the updater, shown, cleared; bad
input refused in one line with nothing sent; and an intent the windows cannot be met for
refused with the reason (issue 27, item 4)."""

from __future__ import annotations

import json

import pytest

from lockstep_common import subjects
from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.testing.kit import attested, intent
from tests.integration.planner_service.conftest import Planner
from tests.integration.planner_service.test_rollout_cli import cli, cli_env

pytestmark = pytest.mark.integration
__all__ = ["cli_env"]


async def test_windows_are_set_audited_announced_shown_and_cleared(cli_env: Planner) -> None:
    code, out = await cli(
        "pool", "set", "p0", "--window", "sat,sun 22:00-06:00", "--window", "wed 01:00-03:00",
        "--timezone", "Europe/Berlin", "--by", "alice",
    )  # fmt: skip
    assert code == 0, out
    assert "pool p0: windows set by alice" in out
    [changed] = await cli_env.wait_for("maintenance.changed")
    assert changed["windows"] == ["sat,sun 22:00-06:00", "wed 01:00-03:00"]
    assert changed["set_by"] == "alice"
    code, out = await cli("pool", "show", "p0", "--json")
    doc = json.loads(out)
    assert (doc["windows"], doc["timezone"], doc["set_by"]) == (
        ["sat,sun 22:00-06:00", "wed 01:00-03:00"],
        "Europe/Berlin",
        "alice",
    )
    assert doc["history"][-1]["action"] == "windows set"
    assert (await cli("pool", "set", "site-a", "--site", "--window", "daily 21:00-05:00"))[0] == 0
    code, out = await cli("pool", "show", "--json")
    assert [(d["scope"], d["name"]) for d in json.loads(out)["windows"]] == [
        ("pool", "p0"),
        ("site", "site-a"),
    ]
    code, out = await cli("pool", "set", "p0", "--always", "--by", "bob")
    assert code == 0 and "windows cleared by bob" in out
    code, out = await cli("pool", "show", "p0", "--json")
    doc = json.loads(out)
    assert doc["windows"] is None and [h["actor"] for h in doc["history"]] == ["alice", "bob"]


async def test_pool_set_and_show_need_no_database(
    cli_env: Planner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26 item 3: the planner answers ``pool.show`` over the bus (set was a publish
    already); nothing listens on port 1, so a command touching the database would fail."""
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    code, out = await cli("pool", "set", "p0", "--window", "sat 22:00-23:00", "--by", "carol")
    assert code == 0 and "pool p0: windows set by carol" in out, out
    code, out = await cli("pool", "show", "--json")
    assert code == 0, out
    assert [(d["name"], d["set_by"]) for d in json.loads(out)["windows"]] == [("p0", "carol")]
    code, out = await cli("pool", "show", "nope")
    assert code == 1 and "no windows were ever set for pool nope" in out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--window", "sat 22:00-22:00"], "never opens"),
        (["--window", "sat 22:00-06:00", "--window", "sun 05:00-07:00"], "overlap"),
        (["--window", "sat 22:00-26:00"], "not a time of day"),
        (["--window", "sat 22:00-06:00", "--timezone", "Europe/Nowhere"], "IANA time zone"),
        (["--window", "someday 01:00-02:00"], "not a day"),
        ([], "give --window"),
        (["--window", "sat 01:00-02:00", "--always"], "give --window"),
    ],
)
async def test_bad_input_is_one_line_exit_2_and_nothing_is_sent(
    cli_env: Planner, args: list[str], says: str
) -> None:
    code, out = await cli("pool", "set", "p0", *args)
    assert code == 2 and says in out and len(out.strip().splitlines()) == 1
    assert await cli_env.app.require().pool.fetchval("SELECT count(*) FROM audit") == 0
    code, out = await cli("pool", "show", "p0")
    assert code == 1 and "no windows were ever set for pool p0" in out


async def test_an_intent_its_windows_cannot_meet_is_refused_with_the_reason(
    cli_env: Planner,
) -> None:
    """A minute a night is shorter than any driver activation of the fleet's pool p0."""
    assert (await cli("pool", "set", "p0", "--window", "daily 22:00-22:01"))[0] == 0
    [bundle] = [attested()]
    await cli_env.publish(
        subjects.intent_submitted(), intent(bundle, change_class=ChangeClass.STANDARD)
    )
    [halted] = await cli_env.wait_for("rollout.halted.")
    assert "pool p0: an outage of" in halted["reason"]
    assert "fits none of its maintenance windows" in halted["reason"]
