"""Broker amnesia (reliability.md 7, A4): JetStream acknowledged the planner's release of the
canary wave (``wave.planned``) and then lost it, as a server that had not yet fsynced it would
after a crash (Jepsen's lazy-fsync finding, reliability.md 1.6; LazyFS is not available, so the
message is deleted from the stream by sequence). The updater, down at that moment, never sees
it. The planner is level-triggered: a released wave none of whose nodes moved for
``wave_redrive_s`` has its release published again under the same event id, within twice that
interval; the updater takes it, every node converges, each node's BMC accepts exactly one push,
and the consumers that had the original drop the copy (their inboxes).

The same for the updater's ``wave.completed`` of the canary, lost while the planner and the
healthgate are down: the updater publishes it again (same id) while no later
wave of the rollout has been released, and the rollout completes.

The whole stack of ``test_rollout_e2e`` on one nats-server and PostgreSQL.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import NotFoundError

from lockstep_cli.polling import until
from lockstep_common.service import ServiceApp
from tests.integration.rollout_stack import FACTORIES, NODES, Stack, running_stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

REDRIVE_S = 3.0  # the planner's and the updater's re-drive interval (300 s by default)


async def planned_row(stack: Stack) -> dict[str, Any] | None:
    """The planner's first ``wave.planned`` once the relay published it."""
    row = await (
        stack.apps["planner"]
        .require()
        .pool.fetchrow(
            "SELECT event_id, subject, payload FROM outbox WHERE subject LIKE 'wave.planned.%'"
            " AND published_at IS NOT NULL ORDER BY id LIMIT 1"
        )
    )
    return dict(row) if row is not None else None


async def msg_ids(js: Any, stream: str, *, after: int) -> list[str]:
    """The ``Nats-Msg-Id`` of every message ``stream`` holds after sequence ``after``."""
    last = (await js.stream_info(stream)).state.last_seq
    ids = []
    for seq in range(after + 1, last + 1):
        try:
            msg = await js.get_msg(stream, seq)
        except NotFoundError:
            continue  # deleted
        ids.append((msg.headers or {}).get("Nats-Msg-Id", ""))
    return ids


async def inbox_has(stack: Stack, service: str, event_id: uuid.UUID) -> bool:
    pool = stack.apps[service].require().pool
    return bool(await pool.fetchval("SELECT count(*) FROM inbox WHERE event_id = $1", event_id))


async def start_rollout_with_updater_stopped(stack: Stack) -> ServiceApp:
    """``Stack.start_rollout`` with the updater stopped between the bundle and the intent (its
    durable consumers keep their place: it misses nothing); returns the stopped updater."""
    bundle = await stack.attest_bundle()
    updater = stack.apps["updater"]
    await updater.stop()
    await stack.submit_intent(bundle)
    return updater


async def start_again(stack: Stack, stopped: ServiceApp) -> None:
    """A new instance of a stopped service, with its settings (a restarted process)."""
    app = FACTORIES[stopped.name](stopped.settings)
    stack.apps[stopped.name] = app
    await app.start()


async def test_a4_a_lost_wave_release_is_redriven_and_the_fleet_converges_with_one_push_each(
    servers: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_stack(
        servers, namespace, tmp_path, monkeypatch, planner={"wave_redrive_s": REDRIVE_S}
    ) as stack:
        updater = await start_rollout_with_updater_stopped(stack)

        # The release is acknowledged by the broker (the relay marked it), then lost.
        row = await until(lambda: planned_row(stack), what="the canary's release published")
        event_id = row["event_id"]
        stream = stack.ns.stream("ROLLOUTS")
        js = stack.nc.jetstream()
        stored = await js.get_last_msg(stream, stack.ns.wire(row["subject"]))
        assert stored.headers is not None and stored.headers["Nats-Msg-Id"] == str(event_id)
        assert stored.seq is not None
        assert await js.delete_msg(stream, stored.seq)
        data = json.loads(row["payload"])["data"]
        rollout_id, wave = data["rollout_id"], data["wave"]

        await start_again(stack, updater)

        async def completed() -> bool:
            return bool(await stack.emitted("planner", "rollout.completed."))

        try:
            await until(completed, what="rollout.completed", timeout_s=120)
        except TimeoutError as exc:
            raise AssertionError(await stack.story()) from exc
        (done,) = await stack.emitted("planner", "rollout.completed.")
        assert done["nodes_updated"] == NODES and done["nodes_failed"] == 0, done

        planner = stack.apps["planner"].require().pool
        first = await planner.fetchrow(
            "SELECT released_at, redriven_at, redrives, release_event FROM waves"
            " WHERE rollout_id = $1 AND number = $2",
            rollout_id,
            wave,
        )
        assert first is not None and first["redrives"] >= 1
        assert first["release_event"] == event_id  # the same event, not a new one
        # Detected within twice the re-drive interval of the release (no node moved meanwhile:
        # the updater never had the wave).
        redrive_s = (first["redriven_at"] - first["released_at"]).total_seconds()
        notes = await planner.fetch(
            "SELECT at, detail FROM audit WHERE rollout_id = $1 AND action = 'wave re-driven'"
            " ORDER BY at",
            rollout_id,
        )
        assert notes, "no re-drive in the audit trail"
        noticed_s = (notes[0]["at"] - first["released_at"]).total_seconds()
        assert noticed_s <= 2 * REDRIVE_S, (noticed_s, redrive_s)
        assert f"event {event_id}" in notes[0]["detail"]

        # The copy is in the stream under its re-drive id; every consumer of wave.planned took
        # the event exactly once (an inbox row per consumer), the updater included.
        ids = await msg_ids(js, stream, after=stored.seq)
        assert f"{event_id}/redrive-1" in ids and str(event_id) not in ids, ids
        for service in ("updater", "healthgate", "inventory"):
            assert await inbox_has(stack, service, event_id), service
        # 0 duplicate flashes: the ledger holds one accepted push per node.
        for node in stack.rt.fleet:
            assert len(stack.pushes(node.id)) == 1, (node.id, stack.pushes(node.id))
            assert stack.rt.scheduler.node(node.id).drain is None, node.id


async def completed_row(stack: Stack) -> dict[str, Any] | None:
    """The updater's first ``wave.completed`` once the relay published it."""
    row = await (
        stack.apps["updater"]
        .require()
        .pool.fetchrow(
            "SELECT event_id, subject, payload FROM outbox WHERE subject LIKE 'wave.completed.%'"
            " AND published_at IS NOT NULL ORDER BY id LIMIT 1"
        )
    )
    return dict(row) if row is not None else None


async def test_a4_a_lost_wave_completion_is_redriven_by_the_updater_and_the_rollout_completes(
    servers: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_stack(
        servers,
        namespace,
        tmp_path,
        monkeypatch,
        updater={"wave_redrive_s": REDRIVE_S},
    ) as stack:
        # The planner and the healthgate, which act on wave.completed, stop once the canary's
        # release is out, before the updater (stopped too) can complete it: nobody takes the
        # completion before it is lost. The inventory stays: the updater asks it for each
        # node's BMC as it works.
        updater = await start_rollout_with_updater_stopped(stack)
        await until(lambda: planned_row(stack), what="the canary's release published")
        stopped = [stack.apps["planner"], stack.apps["healthgate"]]
        for app in stopped:
            await app.stop()
        await start_again(stack, updater)

        row = await until(
            lambda: completed_row(stack), what="the canary's completion published", timeout_s=60
        )
        event_id = row["event_id"]
        stream = stack.ns.stream("ROLLOUTS")
        js = stack.nc.jetstream()
        stored = await js.get_last_msg(stream, stack.ns.wire(row["subject"]))
        assert stored.headers is not None and stored.headers["Nats-Msg-Id"] == str(event_id)
        assert stored.seq is not None
        assert await js.delete_msg(stream, stored.seq)  # acknowledged, then lost
        for app in stopped:
            await start_again(stack, app)

        async def completed() -> bool:
            return bool(await stack.emitted("planner", "rollout.completed."))

        try:
            await until(completed, what="rollout.completed", timeout_s=120)
        except TimeoutError as exc:
            raise AssertionError(await stack.story()) from exc
        (done,) = await stack.emitted("planner", "rollout.completed.")
        assert done["nodes_updated"] == NODES and done["nodes_failed"] == 0, done

        data = json.loads(row["payload"])["data"]
        pool = stack.apps["updater"].require().pool
        wave = await pool.fetchrow(
            "SELECT completed_event, redrives FROM waves WHERE rollout_id = $1 AND wave = $2",
            data["rollout_id"],
            data["wave"],
        )
        assert wave is not None and wave["completed_event"] == event_id
        assert wave["redrives"] >= 1
        ids = await msg_ids(js, stream, after=stored.seq)
        assert f"{event_id}/redrive-1" in ids, ids
        for service in ("planner", "healthgate", "inventory"):
            assert await inbox_has(stack, service, event_id), service
        for node in stack.rt.fleet:
            assert len(stack.pushes(node.id)) == 1, (node.id, stack.pushes(node.id))
            assert stack.rt.scheduler.node(node.id).drain is None, node.id
