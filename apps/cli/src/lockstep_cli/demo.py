"""``lockstep demo``: the system comes up, and one event travels the whole messaging path.

What it shows, each step observed rather than assumed: a state change and its event commit in
one transaction (outbox); the relay publishes it with ``Nats-Msg-Id``; a durable consumer
applies it exactly once (inbox); a redelivered copy has no second effect; a malformed message is
dead-lettered with its reason while the consumer carries on. Then everything stops.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic_settings import SettingsConfigDict
from rich.console import Console
from rich.table import Table

from lockstep_cli.supervisor import SERVICES, running_system
from lockstep_common import subjects
from lockstep_common.consumer import HandlerContext, Subscription
from lockstep_common.envelope import Envelope, make_envelope
from lockstep_common.events.v1 import BundleSubmitted
from lockstep_common.outbox import OutboxMessage, enqueue
from lockstep_common.service import ServiceApp
from lockstep_common.settings import ServiceSettings

SUBJECT = subjects.bundle_submitted()


class DemoSettings(ServiceSettings):
    """Settings of the demo's two in-process participants."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_DEMO_", extra="forbid", populate_by_name=True
    )


class Audit:
    """The demo consumer: records each bundle submission it applies in its own table."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.applied = 0

    async def handle(self, ctx: HandlerContext, env: Envelope[Any]) -> None:
        await ctx.conn.execute(
            "INSERT INTO audit_log (event_id, bundle_uri) VALUES ($1, $2)",
            env.event_id,
            env.data.bundle_uri,
        )
        self.applied += 1


def run_demo(console: Console, data_dir: Path | None) -> None:
    """Bring the system up, show the event path, stop."""
    base = data_dir or Path(tempfile.mkdtemp(prefix="lockstep-demo-"))
    base.chmod(0o755)
    _log_to(base / "logs" / "demo.log")
    console.rule("[bold]Lockstep demo")
    console.print(f"state directory: {base}")
    started = time.monotonic()
    with running_system(base, SERVICES) as (stack, services):
        table = Table(title=f"system up in {time.monotonic() - started:.1f}s")
        table.add_column("part")
        table.add_column("where")
        table.add_row("NATS (JetStream)", str(stack.nats_url))
        table.add_row("PostgreSQL", str(stack.database_url))
        for svc in services:
            table.add_row(f"service {svc.name} (pid {svc.proc.pid})", svc.metrics_url)
        console.print(table)
        asyncio.run(_event_path(console, *stack.urls()))
        console.print("stopping services, then NATS and PostgreSQL ...")
    console.print("[bold green]demo finished[/]: every process stopped.")


async def _event_path(console: Console, nats_url: str, database_url: str) -> None:
    common: dict[str, Any] = {"nats_url": nats_url, "database_url": database_url, "log_json": False}
    producer = ServiceApp("cli", DemoSettings(db_schema="demo_cli", **common))
    audit = Audit(console)
    consumer = ServiceApp(
        "audit",
        DemoSettings(db_schema="demo_audit", consumer_retry_backoff_s=(0.1,), **common),
        subscriptions=[
            Subscription("demo-audit", "BUNDLES", (SUBJECT,), audit.handle, (BundleSubmitted,))
        ],
    )
    await producer.start()
    await consumer.start()
    try:
        produced, consumed = producer.require(), consumer.require()
        async with consumed.pool.acquire() as conn:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS audit_log (event_id uuid PRIMARY KEY, bundle_uri text)"
            )
        console.rule("one event, outbox -> relay -> JetStream -> inbox")
        env = make_envelope(
            BundleSubmitted(
                bundle_uri="file:///srv/bundles/gb200-2026.11.tar", submitted_by="demo"
            ),
            source=producer.source,
        )
        async with produced.pool.acquire() as conn, conn.transaction():
            await enqueue(conn, [OutboxMessage.of(SUBJECT, env)])
            row_id = await conn.fetchval("SELECT id FROM outbox WHERE event_id = $1", env.event_id)
        console.print(f"  [green]1.[/] committed outbox row #{row_id}: {env.type} {env.event_id}")
        pool = produced.pool
        await _until(lambda: _published(pool, env.event_id), "the relay to publish")
        js = produced.js
        wire = producer.namespace.wire(SUBJECT)
        stored = await js.get_last_msg(producer.namespace.stream("BUNDLES"), wire)
        msg_id = (stored.headers or {}).get("Nats-Msg-Id")
        console.print(
            f"  [green]2.[/] relay published it: stream {producer.namespace.stream('BUNDLES')} "
            f"seq {stored.seq}, subject {wire}"
        )
        console.print(
            f"  [green]3.[/] Nats-Msg-Id = {msg_id} (the event id: JetStream dedups on it)"
        )
        await _until(lambda: _value(audit.applied == 1), "the consumer to apply it")
        console.print(
            f"  [green]4.[/] consumer {consumer.namespace.durable('demo-audit')} applied it: "
            "inbox id claimed and audit row written in one transaction, then acked"
        )

        console.rule("the same event again, past the duplicate window")
        await js.publish(wire, env.to_json(), headers={"Nats-Msg-Id": f"{env.event_id}-again"})
        await _until(lambda: _settled(consumer), "the duplicate to be acknowledged")
        rows = await consumed.pool.fetchval("SELECT count(*) FROM audit_log")
        console.print(f"  delivered twice, applied {audit.applied} time(s); audit rows: {rows}")

        console.rule("a malformed message")
        await js.publish(wire, b'{"type": "lockstep.bundle.submitted", "schemaversion": 7}')
        letter = await _until(lambda: _dead_letter(consumer), "the dead letter")
        console.print(f"  dead-lettered ({letter['error_kind']}): {letter['reason']}")
        console.print(
            f"  copy published on {producer.namespace.wire(subjects.dead_letter(SUBJECT))}"
        )
        console.print(
            "  subscribe to every event with: "
            f"[bold]nats sub '{producer.namespace.name}.>' --server {nats_url}[/]"
        )
    finally:
        await consumer.stop()
        await producer.stop()


def _log_to(path: Path) -> None:
    """Keep the in-process participants' logs out of the demo's output."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().handlers[:] = [handler]
    logging.getLogger().setLevel(logging.INFO)


async def _value(value: bool) -> bool:
    return value


async def _published(pool: Any, event_id: Any) -> bool:
    return bool(
        await pool.fetchval(
            "SELECT published_at IS NOT NULL FROM outbox WHERE event_id = $1", event_id
        )
    )


async def _settled(app: ServiceApp) -> bool:
    info = await app.require().js.consumer_info(
        app.namespace.stream("BUNDLES"), app.namespace.durable("demo-audit")
    )
    return bool(info.num_pending == 0 and info.num_ack_pending == 0)


async def _dead_letter(app: ServiceApp) -> dict[str, Any] | None:
    row = await app.require().pool.fetchrow("SELECT reason, error_kind FROM dead_letters LIMIT 1")
    return None if row is None else dict(row)


async def _until(check: Callable[[], Awaitable[Any]], what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
