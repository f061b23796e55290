"""``lockstep rollout`` against a running planner (real NATS + PostgreSQL): plan, start,
status, pause, resume, abort, audit, and bad input refused in one line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats
import pytest
from typer.testing import CliRunner

from lockstep_cli.main import app as cli_app
from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import (
    GateInconclusive,
    OpsRefused,
    PlanAsk,
    RolloutControlRequested,
    RolloutListAnswered,
    RolloutListRequested,
    RolloutStartAnswered,
    RolloutStartRequested,
    WaveCompleted,
)
from lockstep_common.responder import MAX_REQUEST_BYTES
from lockstep_common.vocabulary import ChangeClass, GateVerdict
from lockstep_planner.testing.kit import attested
from tests.integration.planner_service.conftest import Planner

pytestmark = pytest.mark.integration


@pytest.fixture
async def cli_env(planner: Planner, monkeypatch: pytest.MonkeyPatch) -> Planner:
    s = planner.settings
    for name, value in (
        ("LOCKSTEP_NATS_URL", s.nats_url),
        ("LOCKSTEP_DATABASE_URL", s.database_url),
        ("LOCKSTEP_NAMESPACE", s.namespace),
        ("LOCKSTEP_PLANNER_DB_SCHEMA", s.db_schema),
    ):
        monkeypatch.setenv(name, str(value))
    bundle = attested()
    await planner.publish(subjects.bundle_attested(), bundle)

    async def known() -> bool:
        return bool(await planner.app.require().pool.fetchval("SELECT count(*) FROM bundles"))

    await until(known, what="bundle recorded")
    return planner


async def cli(*args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(CliRunner().invoke, cli_app, list(args))
    return result.exit_code, result.output


async def test_plan_prints_the_whole_plan_and_releases_nothing(cli_env: Planner) -> None:
    code, out = await cli(
        "rollout", "plan", "--bundle", "gb200-driver", "--scope", "site=site-a",
        "--class", "standard",
    )  # fmt: skip
    assert code == 0, out
    assert "dry run, nothing stored or released" in out and "estimated duration" in out
    assert "strata covered" in out
    assert "start exactly this plan: lockstep rollout start --plan " in out
    # A dry run is answered, not recorded: no intent, no rollout, nothing published.
    pool = cli_env.app.require().pool
    assert await pool.fetchval("SELECT count(*) FROM intents") == 0
    assert await pool.fetchval("SELECT count(*) FROM rollouts") == 0
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0


async def test_start_status_pause_resume_abort_and_audit(cli_env: Planner) -> None:
    code, out = await cli(
        "rollout", "start", "--bundle", "gb200-driver@2026.03", "--scope", "site=site-a",
        "--class", "standard", "--json",
    )  # fmt: skip
    assert code == 0, out
    rollout_id = json.loads(out)["rollout_id"]
    await cli_env.wait_for("wave.planned.")

    code, out = await cli("rollout", "status", rollout_id, "--json")
    status = json.loads(out)
    assert status["state"] == "running" and status["waves"][0]["state"] == "released"

    assert (await cli("rollout", "pause", rollout_id, "--by", "alice"))[0] == 0
    assert await cli_env.state(rollout_id) == "paused"
    code, out = await cli("rollout", "pause", rollout_id)
    assert code == 1 and "cannot go from paused to paused" in out
    assert (await cli("rollout", "resume", rollout_id, "--by", "bob"))[0] == 0
    code, out = await cli("rollout", "abort", rollout_id, "--by", "carol", "--reason", "freeze")
    assert code == 0, out
    [halted] = await cli_env.wait_for("rollout.halted.")
    assert halted["halted_by"] == "carol" and "freeze" in halted["reason"]

    code, out = await cli("rollout", "audit", rollout_id, "--json")
    trail = [(r["actor"], r["action"]) for r in json.loads(out)]
    assert ("alice", "paused") in trail and ("bob", "resumed") in trail
    assert ("carol", "aborted") in trail and trail[0][1] == "intent submitted"


async def test_status_and_audit_are_asked_of_the_planner_without_a_database(
    cli_env: Planner, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out = await cli(
        "rollout", "start", "--bundle", "gb200-driver@2026.03", "--scope", "site=site-a",
        "--class", "standard", "--json",
    )  # fmt: skip
    assert code == 0, out
    rollout_id = json.loads(out)["rollout_id"]
    await cli_env.wait_for("wave.planned.")
    # Nothing listens there: status and audit come from the planner over the bus.
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    code, out = await cli("rollout", "status", rollout_id, "--json")
    assert code == 0, out
    status = json.loads(out)
    assert status["rollout_id"] == rollout_id and status["state"] == "running"
    assert status["waves"][0]["nodes"] >= 1 and status["nodes_by_step"]
    # The plan's strata as the planner stored them (issue 32: the console's rollout page).
    plan = json.loads(
        await cli_env.app.require().pool.fetchval(
            "SELECT plan::text FROM rollouts WHERE rollout_id = $1", rollout_id
        )
    )
    assert status["strata"] and [
        (s["profile"], s["supplier"], s["canary"], s["controls"], s["size"])
        for s in status["strata"]
    ] == [
        (p["profile"], p["supplier"], p["canary"], p["controls"], size)
        for p, size in zip(plan["strata"], plan["stratum_sizes"], strict=True)
    ]
    code, out = await cli("rollout", "status", rollout_id)
    assert code == 0 and f"rollout {rollout_id} running" in out, out
    code, out = await cli("rollout", "audit", rollout_id)
    assert code == 0 and "intent submitted" in out, out
    code, out = await cli("rollout", "status", "r-nope")
    assert code == 1 and "no rollout r-nope" in out
    code, out = await cli("rollout", "audit", "r-nope")
    assert code == 1 and "no audit trail for r-nope" in out
    code, out = await cli("rollout", "status", "bad id")
    assert code == 2 and "rollout_id" in out
    # Controls too: the planner carries the command out and its outcome is the reply.
    code, out = await cli("rollout", "pause", rollout_id, "--by", "alice", "--reason", "freeze")
    assert (code, out.strip()) == (0, f"{rollout_id}: pause done"), out
    assert await cli_env.state(rollout_id) == "paused"
    code, out = await cli("rollout", "abort", "r-nope")
    assert code == 1 and "no rollout r-nope" in out
    # The reader may look, not steer: refused, recorded with who asked, nothing changed.
    nc = await nats.connect(cli_env.settings.nats_url)
    try:
        subject = f"{cli_env.settings.namespace}.ops.reader.planner.rollout.control"
        request = RolloutControlRequested(rollout_id=rollout_id, action="resume", by="mallory")
        body = make_envelope(request, source="/t").to_json()
        reply = REGISTRY.decode(
            (await nc.request(subject, body, timeout=10)).data, max_bytes=1 << 20
        )
    finally:
        await nc.close()
    assert isinstance(reply.data, OpsRefused) and reply.data.kind == "forbidden"
    assert await cli_env.state(rollout_id) == "paused"
    rows = await cli_env.app.require().pool.fetch(
        "SELECT identity, outcome FROM operator_requests WHERE command = 'rollout.control'"
        " ORDER BY asked_at"
    )
    assert [tuple(r) for r in rows] == [("cli", "done"), ("cli", "refused"), ("reader", "refused")]


async def test_bad_input_is_one_line_and_publishes_nothing(
    cli_env: Planner, tmp_path: Path
) -> None:
    bad: list[tuple[list[str], str]] = [
        (["--bundle", "no-such-bundle"], "no attested bundle no-such-bundle"),
        (["--bundle", "gb200-driver", "--class", "weekly"], "--class 'weekly'"),
        (["--bundle", "gb200-driver", "--scope", "rack=1"], "--scope: 'rack': unknown key"),
    ]
    bad.append((["--bundle", "gb200 driver"], "--bundle 'gb200 driver': not a bundle reference"))
    strategy = tmp_path / "s.yaml"
    strategy.write_text("wave_fractions: [0.5, 0.2]\nsoak: 3\n")
    bad.append((["--bundle", "gb200-driver", "--strategy", str(strategy)], "--strategy"))
    for args, message in bad:
        full: dict[str, Any] = {"--scope": "site=site-a", "--class": "standard"}
        pairs = dict(zip(args[::2], args[1::2], strict=True))
        full.update(pairs)
        argv = [x for kv in full.items() for x in kv]
        code, out = await cli("rollout", "start", *argv)
        assert code in (1, 2) and message in out, (args, out)
        assert "Traceback" not in out
    assert await cli_env.app.require().pool.fetchval("SELECT count(*) FROM intents") == 0


async def test_a_refused_intent_names_every_reason(cli_env: Planner) -> None:
    code, out = await cli(
        "rollout", "start", "--bundle", "gb200-driver", "--scope", "pool=nowhere",
        "--class", "standard",
    )  # fmt: skip
    assert code == 1 and "refused" in out and "scope matches no node" in out


async def test_a_routine_rollout_starts_once_a_trusted_approver_signs_its_plan(
    cli_env: Planner,
) -> None:
    code, out = await cli(
        "rollout", "start", "--bundle", "gb200-driver", "--scope", "site=site-a",
        "--class", "routine", "--approval", "CHG-1042", "--json",
    )  # fmt: skip
    assert code == 0, out
    rollout_id = json.loads(out)["rollout_id"]
    assert await cli_env.state(rollout_id) == "planned"
    alice, bob = str(cli_env.keys["alice"]), str(cli_env.keys["bob"])

    code, out = await cli("rollout", "approve", rollout_id, "--key", bob, "--as", "alice")
    assert code == 1 and "forged or corrupt" in out
    code, out = await cli("rollout", "approve", rollout_id, "--key", alice, "--as", "alice")
    assert code == 0, out
    await cli_env.wait_for("wave.planned.")
    assert await cli_env.state(rollout_id) == "running"
    code, out = await cli("rollout", "approve", rollout_id, "--key", alice, "--as", "alice")
    assert code == 1 and "only a planned rollout waiting for approval" in out


async def test_an_inconclusive_gate_pauses_until_an_operator_resumes(cli_env: Planner) -> None:
    code, out = await cli(
        "rollout", "start", "--bundle", "gb200-driver", "--scope", "site=site-a",
        "--class", "standard", "--json",
    )  # fmt: skip
    assert code == 0, out
    rollout_id = json.loads(out)["rollout_id"]
    [wave0] = await cli_env.wait_for("wave.planned.")
    # The verdict first: it travels on another stream than wave.completed and may overtake it
    # (seen in CI); the planner retries it until the wave's soak has begun.
    await cli_env.publish(
        subjects.gate(GateVerdict.INCONCLUSIVE, rollout_id),
        GateInconclusive(
            rollout_id=rollout_id, wave=0, verdict=GateVerdict.INCONCLUSIVE, evidence=()
        ),
    )
    await cli_env.publish(
        subjects.wave_completed(rollout_id),
        WaveCompleted(rollout_id=rollout_id, wave=0, succeeded=tuple(wave0["node_ids"]), failed=()),
    )

    async def paused() -> bool:
        return await cli_env.state(rollout_id) == "paused"

    await until(paused, what="rollout paused")
    code, out = await cli("rollout", "status", rollout_id, "--json")
    assert json.loads(out)["waves"][0]["state"] == "held"
    assert (await cli("rollout", "resume", rollout_id, "--by", "bob"))[0] == 0
    waves = await cli_env.wait_for("wave.planned.", 2)
    assert [w["wave"] for w in waves] == [0, 1]


async def test_start_with_a_reviewed_plan_starts_that_plan_or_names_what_changed(
    cli_env: Planner, tmp_path: Path
) -> None:
    """`plan --json` twice gives the same plan; `start --plan FILE` starts exactly it, and once
    the fleet changed, `start --plan HASH` is refused naming the difference."""
    argv = ["--bundle", "gb200-driver", "--scope", "site=site-a", "--class", "standard"]
    code, first = await cli("rollout", "plan", *argv, "--json")
    assert code == 0, first
    code, second = await cli("rollout", "plan", *argv, "--json")
    reviewed = json.loads(first)
    assert json.loads(second)["plan_hash"] == reviewed["plan_hash"]
    assert json.loads(second)["plan"]["waves"] == reviewed["plan"]["waves"]
    saved = tmp_path / "plan.json"
    saved.write_text(first)

    code, out = await cli("rollout", "start", "--plan", str(saved), "--json")
    assert code == 0, out
    started = json.loads(out)
    assert started["plan_hash"] == reviewed["plan_hash"] and not started["dry_run"]
    [wave0] = await cli_env.wait_for("wave.planned.")
    assert wave0["node_ids"] == reviewed["plan"]["waves"][0]["nodes"]
    assert (await cli("rollout", "abort", started["rollout_id"], "--reason", "test"))[0] == 0

    cli_env.inventory.nodes = cli_env.inventory.nodes[:-1]  # a node left the fleet
    code, out = await cli("rollout", "start", "--plan", reviewed["plan_hash"])
    assert code == 1, out
    assert "the plan changed since it was reviewed" in out
    assert "node(s) no longer in the plan: n019" in out


async def test_a_bad_reviewed_plan_is_one_line_and_publishes_nothing(
    cli_env: Planner, tmp_path: Path
) -> None:
    garbled = tmp_path / "garbled.json"
    garbled.write_text("{not json")
    planless = tmp_path / "planless.json"
    planless.write_text('{"plan_hash": "abc"}')
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({"plan_hash": "A" * 64, "plan": {}}))
    for args, message in (
        (["--plan", str(garbled)], "not the JSON `lockstep rollout plan --json` prints"),
        (["--plan", str(planless)], "no plan"),
        (["--plan", str(forged)], "plan_hash missing or not 64 lower-case hex digits"),
        (["--plan", str(tmp_path / "absent.json")], "neither a plan hash nor a readable file"),
        (["--plan", "0" * 64], f"no rollout was planned with hash {'0' * 64}"),
        (["--plan", "0" * 64, "--class", "routine"], "--bundle, --scope and --class are required"),
        (["--plan", str(planless), "--class", "routine"], "--bundle, --scope and --class are"),
        (["--class", "routine"], "--bundle, --scope and --class are required"),
    ):
        code, out = await cli("rollout", "start", *args)
        assert code in (1, 2) and message in out, (args, out)
        assert len(out.strip().splitlines()) == 1 and "Traceback" not in out
    assert await cli_env.app.require().pool.fetchval("SELECT count(*) FROM intents") == 0


async def test_plan_start_and_list_are_asked_of_the_planner_without_a_database(
    cli_env: Planner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens there: every rollout command is answered by the planner over the bus.
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    argv = ["--bundle", "gb200-driver", "--scope", "site=site-a"]
    code, out = await cli("rollout", "plan", *argv, "--class", "routine", "--json")
    assert code == 0, out
    dry = json.loads(out)
    assert dry["dry_run"] and sum(len(w["nodes"]) for w in dry["plan"]["waves"]) == 20
    code, out = await cli(
        "rollout", "start", *argv, "--class", "routine", "--approval", "CHG-1", "--json"
    )
    assert code == 0, out
    routine = json.loads(out)
    # The decision is the reply: planned, awaiting its class's signed approval.
    assert (routine["state"], routine["rollout_state"]) == ("planned", "planned")
    assert routine["approvals_needed"] == 1 and routine["plan_hash"] == dry["plan_hash"]
    code, out = await cli("rollout", "list", "--json")
    assert code == 0, out
    assert [(r["rollout_id"], r["state"]) for r in json.loads(out)] == [
        (routine["rollout_id"], "planned")
    ]
    code, out = await cli("rollout", "abort", routine["rollout_id"], "--reason", "test")
    assert code == 0, out
    code, out = await cli("rollout", "start", *argv, "--class", "standard")
    assert code == 0 and "state running" in out, out
    code, out = await cli("rollout", "list", "--json")
    listed = [(r["state"], r["change_class"]) for r in json.loads(out)]
    assert listed == [("running", "standard"), ("aborted", "routine")], "newest first"
    code, out = await cli("rollout", "list", "--state", "aborted")
    assert code == 0 and routine["rollout_id"] in out and "running" not in out, out
    code, out = await cli("rollout", "list", "--limit", "1", "--json")
    assert [r["state"] for r in json.loads(out)] == ["running"]


async def test_a_dry_run_whose_scope_selects_nothing_publishes_nothing(cli_env: Planner) -> None:
    code, out = await cli(
        "rollout", "plan", "--bundle", "gb200-driver", "--scope", "pool=nowhere",
        "--class", "standard",
    )  # fmt: skip
    assert code == 1 and "refused" in out and "scope matches no node" in out, out
    pool = cli_env.app.require().pool
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 0  # no rollout.halted
    assert await pool.fetchval("SELECT count(*) FROM intents") == 0


async def _ask(cli_env: Planner, identity: str, command: str, body: bytes) -> Any:
    nc = await nats.connect(cli_env.settings.nats_url)
    try:
        subject = f"{cli_env.settings.namespace}.ops.{identity}.planner.{command}"
        reply = await nc.request(subject, body, timeout=30)
    finally:
        await nc.close()
    return reply.data


async def test_hostile_start_requests_change_nothing_and_a_retry_is_the_same_decision(
    cli_env: Planner,
) -> None:
    bundle = await cli_env.app.require().pool.fetchval("SELECT stack_hash FROM bundles")
    request = RolloutStartRequested(
        ask=PlanAsk(stack_hash=bundle, change_class=ChangeClass.STANDARD), by="mallory"
    )
    env = make_envelope(request, source="/t")

    def decoded(data: bytes) -> Any:
        return REGISTRY.decode(data, max_bytes=1 << 20).data

    # The reader may look, not start: refused, recorded with who asked, nothing planned.
    refused = decoded(await _ask(cli_env, "reader", "rollout.start", env.to_json()))
    assert isinstance(refused, OpsRefused) and refused.kind == "forbidden"
    # Not an envelope, an envelope of another command, one over the request limit.
    for body in (
        b"{not json",
        make_envelope(
            RolloutControlRequested(rollout_id="r-1", action="pause", by="x"), source="/t"
        ).to_json(),
        b" " * (MAX_REQUEST_BYTES + 1),
    ):
        bad = decoded(await _ask(cli_env, "cli", "rollout.start", body))
        assert isinstance(bad, OpsRefused) and bad.kind == "invalid", bad
    pool = cli_env.app.require().pool
    assert await pool.fetchval("SELECT count(*) FROM intents") == 0
    # The same request id twice (a retry after a lost reply): one intent, the same decision.
    env = make_envelope(request, source="/t")  # the reader's id is spent on its refusal
    first = await _ask(cli_env, "cli", "rollout.start", env.to_json())
    again = await _ask(cli_env, "cli", "rollout.start", env.to_json())
    answered = decoded(first)
    assert isinstance(answered, RolloutStartAnswered) and answered.decision == "planned"
    assert answered.intent_id == env.event_id and again == first
    assert await pool.fetchval("SELECT count(*) FROM intents") == 1
    assert await pool.fetchval("SELECT count(*) FROM rollouts") == 1
    # The same id with another request is refused, not taken for the first.
    other = env.model_copy(update={"data": request.model_copy(update={"by": "eve"})})
    reused = decoded(await _ask(cli_env, "cli", "rollout.start", other.to_json()))
    assert isinstance(reused, OpsRefused) and "already used for another request" in reused.reason
    rows = await pool.fetch(
        "SELECT identity, outcome FROM operator_requests WHERE command = 'rollout.start'"
        " ORDER BY asked_at"
    )
    assert [tuple(r) for r in rows] == [("reader", "refused"), ("cli", "done")]


async def test_the_reader_may_plan_and_list_but_not_start(
    cli_env: Planner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The CLI asks on ops.reader.> as the server would let the reader (this test server
    # authenticates nobody; the permission matrix is tested against one that does).
    secret = tmp_path / "reader.pass"
    secret.write_text("unused")
    secret.chmod(0o600)
    monkeypatch.setenv("LOCKSTEP_NATS_USER", "reader")
    monkeypatch.setenv("LOCKSTEP_NATS_PASSWORD_FILE", str(secret))
    argv = ["--bundle", "gb200-driver", "--scope", "site=site-a", "--class", "standard"]
    code, out = await cli("rollout", "plan", *argv)
    assert code == 0 and "dry run, nothing stored or released" in out, out
    code, out = await cli("rollout", "start", *argv)
    assert code == 2 and "identity 'reader' may only read" in out, out
    assert len(out.strip().splitlines()) == 1
    code, out = await cli("rollout", "list", "--json")
    assert (code, json.loads(out)) == (0, [])
    pool = cli_env.app.require().pool
    assert await pool.fetchval("SELECT count(*) FROM intents") == 0
    assert [
        tuple(r) for r in await pool.fetch("SELECT identity, outcome FROM operator_requests")
    ] == [("reader", "refused")]


async def test_rollout_list_pages_newest_first(cli_env: Planner) -> None:
    started = []
    for _ in range(3):
        code, out = await cli(
            "rollout", "start", "--bundle", "gb200-driver", "--scope", "site=site-a",
            "--class", "routine", "--json",
        )  # fmt: skip
        assert code == 0, out
        started.append(json.loads(out)["rollout_id"])
        code, out = await cli("rollout", "abort", started[-1])
        assert code == 0, out
    seen: list[str] = []
    before = None
    nc = await nats.connect(cli_env.settings.nats_url)
    try:
        subject = f"{cli_env.settings.namespace}.ops.cli.planner.rollout.list"
        while True:
            body = make_envelope(RolloutListRequested(before=before, limit=2), source="/t")
            answered = await nc.request(subject, body.to_json(), timeout=10)
            reply = REGISTRY.decode(answered.data, max_bytes=1 << 20)
            assert isinstance(reply.data, RolloutListAnswered)
            seen.extend(r.rollout_id for r in reply.data.rollouts)
            before = reply.data.next_before
            if before is None:
                break
        unknown = make_envelope(RolloutListRequested(before="r-nope"), source="/t").to_json()
        refused = REGISTRY.decode(
            (await nc.request(subject, unknown, timeout=10)).data, max_bytes=1 << 20
        )
    finally:
        await nc.close()
    assert seen == started[::-1]
    assert isinstance(refused.data, OpsRefused) and refused.data.kind == "not_found"
    code, out = await cli("rollout", "list")
    assert code == 0 and all(r in out for r in started) and "aborted" in out, out


async def test_a_start_the_planner_cannot_plan_yet_says_so_and_is_planned_later(
    cli_env: Planner,
) -> None:
    cli_env.settings = cli_env.settings.model_copy(update={"fleet_timeout_s": 1.0, "lease_s": 2.0})
    await cli_env.restart()
    cli_env.inventory.silent = True  # the inventory is down: the fleet cannot be read
    code, out = await cli(
        "rollout", "start", "--bundle", "gb200-driver", "--scope", "site=site-a",
        "--class", "standard",
    )  # fmt: skip
    assert code == 1 and "recorded, not decided yet: the fleet could not be read" in out, out
    rollout_id = out.split("lockstep rollout status ")[1].split("`")[0]
    assert await cli_env.state(rollout_id) is None
    cli_env.inventory.silent = False  # back: the worker plans the intent once the hold lapses

    async def running() -> bool:
        return await cli_env.state(rollout_id) == "running"

    await until(running, what="the held intent planned by the worker")
