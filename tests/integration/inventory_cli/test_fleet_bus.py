"""``lockstep fleet pin|admit``: JetStream pins the service applies, admission exit codes."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from nats.aio.msg import Msg

from lockstep_cli.polling import until
from lockstep_common import canonical, subjects
from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.events.v1 import PinChanged, ScopeSelector
from lockstep_common.service import ServiceApp
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import Component
from lockstep_inventory.adapters import state
from lockstep_inventory.domain.observation import IN_BAND
from lockstep_inventory.importing import import_command
from lockstep_inventory.operator_commands import COMMANDS
from lockstep_inventory.settings import Settings

from .conftest import SITE, Harness, cli, cli_json

pytestmark = pytest.mark.integration


def write_stack(path: Path, stack: dict[str, dict[Component, str]]) -> Path:
    path.write_text(
        yaml.safe_dump({p: {str(c): v for c, v in s.items()} for p, s in stack.items()})
    )
    return path


def firmware(harness: Harness) -> dict[Component, str]:
    """The golden stack without in-band components: the simulated nodes run no agent here."""
    return {c: v for c, v in harness.golden().items() if c not in IN_BAND}


async def pins_stored(harness: Harness) -> list[str]:
    async with harness.app.require().pool.acquire() as conn:
        return [p.stack_hash for p in await state.pins(conn)]


async def test_bad_pin_input_exits_2_and_publishes_nothing(
    env: None, harness: Harness, tmp_path: Path
) -> None:
    good = write_stack(tmp_path / "good.yaml", {"gb200": firmware(harness)})
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text() + "  gpu_fw: '1.0'\n")
    cases = [
        (
            ["--scope", f"site={SITE}", "--stack", str(bad)],
            "gb200.gpu_fw: not a Lockstep component",
        ),
        (["--scope", "pool=train", "--stack", str(good)], "at least one site"),
        (["--scope", f"site={SITE},rack=r1", "--stack", str(good)], "--scope: 'rack': unknown key"),
        (["--scope", "site=a.b", "--stack", str(good)], "site"),
        (["--scope", f"site={SITE}", "--stack", str(good), "--rollout-id", "x y"], "rollout_id"),
    ]
    for args, needle in cases:
        code, out = await cli("fleet", "pin", *args)
        assert (code, needle in out) == (2, True), (args, out)
    info = await harness.nc.jetstream().stream_info(harness.ns.stream("PINS"))
    assert info.state.messages == 0
    assert await pins_stored(harness) == []


async def test_pin_is_published_acknowledged_and_applied_then_admit_answers(
    env: None, harness: Harness, tmp_path: Path
) -> None:
    stack = {"gb200": firmware(harness)}
    path = write_stack(tmp_path / "stack.yaml", stack)
    empty = ("fleet", "pin", "--scope", f"site={SITE},pool=nowhere", "--stack", str(path))
    code, out = await cli(*empty)
    assert code == 2 and f"selects no registered node in site(s) {SITE}" in out
    info = await harness.nc.jetstream().stream_info(harness.ns.stream("PINS"))
    assert info.state.messages == 0  # refused before anything was published
    doc = await cli_json(*empty, "--allow-empty")
    expected = canonical.stack_hash({"gb200": {str(c): v for c, v in stack["gb200"].items()}})
    assert doc["stack_hash"] == expected and doc["sites"] == [SITE]
    msg = await harness.nc.jetstream().get_msg(harness.ns.stream("PINS"), 1)
    assert msg.subject == harness.ns.wire(subjects.pin_changed(SITE))
    assert msg.headers is not None and msg.headers["Nats-Msg-Id"] == doc["event_ids"][0]

    async def applied() -> bool:
        return expected in await pins_stored(harness)

    await until(applied, what="the service storing the CLI's pin")
    # That pin's pool matches no node; now pin the whole site (a human run, not --json).
    code, out = await cli("fleet", "pin", "--scope", f"site={SITE}", "--stack", str(path))
    assert code == 0 and expected in out
    await harness.sweep()
    ids = [n.id for n in harness.nodes]

    code, out = await cli("fleet", "admit", "--stack-hash", expected, "--nodes", ",".join(ids))
    assert code == 0, out
    assert all(f"{i}  admitted" in out for i in ids)

    bad = harness.nodes[2].id
    harness.sim.bmc(bad).node.components["FW_BMC_0"].version = "GB200Nvl-24.09-1"
    await harness.sweep()
    code, out = await cli(
        "fleet", "admit", "--stack-hash", expected, "--nodes", ids[0], "--nodes", bad, "--json"
    )
    verdicts = {n["node_id"]: n for n in json.loads(out)["nodes"]}
    assert code == 1 and verdicts[ids[0]]["admitted"] is True
    assert verdicts[bad]["admitted"] is False
    assert any("bmc: members run" in r for r in verdicts[bad]["reasons"])

    code, out = await cli("fleet", "admit", "--stack-hash", "f" * 64, "--nodes", ids[0])
    assert code == 1 and "unknown to inventory" in out
    code, out = await cli("fleet", "admit", "--stack-hash", expected[:63], "--nodes", ids[0])
    assert code == 2 and "64 lower-case hex" in out


async def test_admit_exits_3_when_no_service_answers(env: None, namespace: str) -> None:
    code, out = await cli(
        "fleet", "admit", "--stack-hash", "a" * 64, "--nodes", "n1", "--timeout", "0.5"
    )
    assert code == 3 and "is the inventory service running?" in out


async def test_admit_exits_2_on_an_error_reply(env: None, servers: Any, namespace: str) -> None:
    nc = await nats.connect(servers.nats_url)

    async def refuse(msg: Msg) -> None:
        # What the service answers a request it cannot decode (admission._refuse).
        await nc.publish(
            msg.reply, b'{"error": "node_ids: too many"}', headers={"Lockstep-Error": "too many"}
        )

    sub = await nc.subscribe(Namespace(namespace).wire(subjects.admission_check()), cb=refuse)
    try:
        await nc.flush()
        code, out = await cli("fleet", "admit", "--stack-hash", "a" * 64, "--nodes", "n1")
    finally:
        await sub.unsubscribe()
        await nc.close()
    assert code == 2 and "inventory refused the request: node_ids: too many" in out


async def test_pin_exits_1_when_no_stream_acknowledges(
    env: None, servers: Any, namespace: str, tmp_path: Path
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "nodes:\n- {id: n1, bmc_url: 'https://127.0.0.1:1', profile: gb200, site: s1,"
        " credentials: 'env:LOCKSTEP_TESTBMC'}\n"
    )
    # The inventory's operator commands answer (the registry the pin checks), but the stream
    # that would store the pin is gone.
    answering = ServiceApp(
        "inventory",
        Settings(
            nats_url=servers.nats_url,
            database_url=servers.database_url,
            namespace=namespace,
            db_schema=f"{namespace}_inventory",
            log_json=False,
        ),
        migration_package="lockstep_inventory.migrations",
    )
    answering.add_operator_commands(*COMMANDS, import_command(packaged_rules()))
    await answering.start()
    assert (await cli("fleet", "import", str(fleet)))[0] == 0  # a node for the pin to select
    await answering.require().js.delete_stream(answering.namespace.stream("PINS"))
    try:
        path = tmp_path / "s.json"
        path.write_text('{"gb200": {"bios": "1.0"}}')
        code, out = await cli(
            "fleet", "pin", "--scope", "site=s1", "--stack", str(path), "--timeout", "1"
        )
    finally:
        await answering.stop()
    assert code == 1 and "pin for site s1 not acknowledged" in out, out


async def test_pins_take_effect_in_stream_order_whatever_their_senders_clocks(
    env: None, harness: Harness, tmp_path: Path
) -> None:
    """Issue 15: a forged pin.changed dated 2999 was applied, after which every genuine
    `lockstep fleet pin` printed "pinned" and changed nothing. Now the far-future one is
    refused, one dated a few minutes ahead (within the clock skew) or long ago takes effect in
    its place in the stream, and a genuine pin after any of them takes effect."""
    golden = {"gb200": firmware(harness)}
    genuine = write_stack(tmp_path / "genuine.yaml", golden)
    scope = ScopeSelector(sites=(SITE,))  # the (site, scope) the CLI's site=SITE pin holds

    async def forge(bmc: str, at: dt.datetime) -> str:
        stack = {"gb200": {**golden["gb200"], Component.BMC: bmc}}
        stack_hash = canonical.stack_hash(stack)
        data = PinChanged(site=SITE, scope=scope, stack_hash=stack_hash, stack=stack)
        await harness.publish(subjects.pin_changed(SITE), data, occurred_at=at)
        return stack_hash

    async def current_is(stack_hash: str) -> None:
        async def held() -> bool:
            return await pins_stored(harness) == [stack_hash]

        await until(held, what=f"the held pin to become {stack_hash[:12]}")

    async def pin_genuine() -> str:
        doc = await cli_json("fleet", "pin", "--scope", f"site={SITE}", "--stack", str(genuine))
        return str(doc["stack_hash"])

    now = dt.datetime.now(dt.UTC)
    await forge("forged-2999", dt.datetime(2999, 1, 1, tzinfo=dt.UTC))
    await current_is(await pin_genuine())
    async with harness.app.require().pool.acquire() as conn:
        reason = await conn.fetchval("SELECT reason FROM dead_letters")
    assert "in the future, beyond the allowed clock skew" in reason

    # Dated ahead, but within the skew: it takes effect when it arrives, and no longer.
    await current_is(await forge("forged-soon", now + dt.timedelta(minutes=4)))
    await current_is(await pin_genuine())
    # Dated long ago but arriving later: it takes effect too (arrival order, not its date).
    await current_is(await forge("forged-old", dt.datetime(2001, 1, 1, tzinfo=dt.UTC)))
    await current_is(await pin_genuine())


async def test_pin_from_a_known_good_node_pins_what_it_runs_and_the_fleet_conforms(
    env: None, harness: Harness, tmp_path: Path
) -> None:
    node = harness.nodes[0].id
    code, out = await cli("fleet", "pin", "--scope", f"site={SITE}", "--from-node", node)
    assert code == 2 and f"node {node}: its BMC was never read" in out  # nothing swept yet
    await harness.sweep()
    for args, needle in [
        (["--from-node", "no-such-node"], "node no-such-node is not registered"),
        (["--from-node", node, "--stack", str(tmp_path / "x.yaml")], "one of them"),
        ([], "--stack FILE or --from-node NODE"),
    ]:
        code, out = await cli("fleet", "pin", "--scope", f"site={SITE}", *args)
        assert (code, needle in out) == (2, True), (args, out)
    info = await harness.nc.jetstream().stream_info(harness.ns.stream("PINS"))
    assert info.state.messages == 0  # every refusal before anything was published

    saved = tmp_path / "golden.yaml"
    doc = await cli_json(
        "fleet", "pin", "--scope", f"site={SITE}", "--from-node", node, "--save", str(saved)
    )
    assert yaml.safe_load(saved.read_text()) == {
        "gb200": {str(c): v for c, v in firmware(harness).items()}
    }
    assert doc["stack_hash"] == canonical.stack_hash(yaml.safe_load(saved.read_text()))

    async def applied() -> bool:
        return doc["stack_hash"] in await pins_stored(harness)

    await until(applied, what="the pin taken from the node")
    await harness.sweep()
    code, out = await cli(
        "fleet",
        "admit",
        "--stack-hash",
        doc["stack_hash"],
        "--nodes",
        ",".join(n.id for n in harness.nodes),
    )
    assert code == 0, out  # every node runs what the known-good one runs
