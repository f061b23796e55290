"""``lockstep demo``: the system comes up, one event travels the whole messaging path, and the
fleet and rollout stories follow (``demo_fleet``, ``demo_rollout``).

What it shows, each step observed rather than assumed: a state change and its event commit in
one transaction (outbox); the relay publishes it with ``Nats-Msg-Id``; a durable consumer
applies it exactly once (inbox); a redelivered copy has no second effect; a malformed message is
dead-lettered with its reason while the consumer carries on; the attest service verifies the
submitted bundle (real signatures, RIM, S.A.F.E. report, PLDM package) and rejects a copy with
one changed byte. Then everything stops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats.js.errors
from pydantic_settings import SettingsConfigDict
from rich.console import Console
from rich.table import Table

from lockstep_bench.demo_fleet import fleet_drift, service_env
from lockstep_bench.demo_rollout import prepare
from lockstep_cli import console_child
from lockstep_cli.catalog import stream_names
from lockstep_cli.polling import until
from lockstep_cli.supervisor import SERVICES, provision_topology, running_system
from lockstep_common import subjects
from lockstep_common.advisories import watcher_durable
from lockstep_common.bus_access import Durable, Party
from lockstep_common.consumer import HandlerContext, On, Subscription
from lockstep_common.db import redact_dsn
from lockstep_common.envelope import Envelope, EventData
from lockstep_common.events.v1 import BundleSubmitted
from lockstep_common.identities import ADMIN
from lockstep_common.outbox import emitting
from lockstep_common.service import ServiceApp
from lockstep_common.settings import ServiceSettings
from lockstep_common.subjects import Namespace
from lockstep_devstack import Stack

SUBJECT = subjects.bundle_submitted()
CONSOLE = "127.0.0.1:8080"  # lockstep console's default; busy: the table says so
PRODUCER, CONSUMER = "demo-cli", "demo-audit"  # NATS identities of the demo's participants


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

    async def handle(self, ctx: HandlerContext, env: Envelope[BundleSubmitted]) -> None:
        await ctx.conn.execute(
            "INSERT INTO audit_log (event_id, bundle_uri) VALUES ($1, $2)",
            env.event_id,
            env.data.bundle_uri,
        )
        self.applied += 1


def run_demo(
    console: Console,
    data_dir: Path | None,
    *,
    screenshots: Path | None = None,
    listen: str = CONSOLE,
) -> None:
    """Bring the system up, show the event path, stop; with ``screenshots``, the console's pages
    of the halted rollout and the fleet are written there as the rollout halts."""
    base = data_dir or Path(tempfile.mkdtemp(prefix="lockstep-demo-"))
    base.chmod(0o755)
    _log_to(base / "logs" / "demo.log")
    console.rule("[bold]Lockstep demo")
    console.print(f"state directory: {base}")
    from lockstep_attest.testing.bundles import make_kit

    kit = make_kit(base / "release")
    console.print(f"built and signed a demo bundle: {kit.bundle} (trust store {kit.trust})")
    started = time.monotonic()
    rollouts = prepare(base)
    env = {
        "LOCKSTEP_ATTEST_TRUST_STORE": str(kit.trust),
        "LOCKSTEP_ATTEST_BUNDLE_ROOTS": json.dumps([str(kit.bundle.parent)]),
        **service_env(),
        **rollouts.env,
    }
    ns = Namespace(service_env().get("LOCKSTEP_NAMESPACE", "lockstep"))
    with (
        running_system(base, SERVICES, extra_env=env, extra_parties=demo_parties(ns)) as (
            stack,
            services,
        ),
        # The console, to watch the rollout and the canary's gate as the demo goes (issue 32).
        console_child.beside(stack, base / "logs", listen) as console_row,
    ):
        table = Table(title=f"system up in {time.monotonic() - started:.1f}s")
        table.add_column("part")
        table.add_column("where")
        table.add_row("NATS (JetStream)", str(stack.nats_url))
        table.add_row("PostgreSQL (admin)", redact_dsn(str(stack.database_url)))
        for svc in services:
            table.add_row(f"service {svc.name} (pid {svc.proc.pid})", svc.metrics_url)
        table.add_row(*console_row)
        console.print(table)
        if screenshots is not None:
            rollouts = dataclasses.replace(rollouts, screenshots=(f"http://{listen}", screenshots))
        asyncio.run(_event_path(console, stack, bundle=kit.bundle))
        asyncio.run(fleet_drift(console, stack, rollouts, kit))
        console.print("stopping services, then NATS and PostgreSQL ...")
    console.print(
        f"[bold green]demo finished[/] in {time.monotonic() - started:.0f}s: every process stopped."
    )
    console.print(kept(base), highlight=False, soft_wrap=True)


def kept(base: Path) -> str:
    """What the demo leaves behind, and how to remove it: its state is kept for a look at the
    logs and databases, and it holds the demo bundle's private signing key (mode 0600)."""
    size = sum(p.stat().st_size for p in base.rglob("*") if p.is_file() and not p.is_symlink())
    return (
        f"state kept in {base} ({size / 1e6:.0f} MB: logs, databases, and the demo's private "
        f"signing and approver keys, mode 0600); remove it with: rm -rf {base}"
    )


@dataclass
class Participants:
    """The demo's in-process producer (the CLI's outbox) and consumer (an audit log)."""

    producer: ServiceApp
    consumer: ServiceApp
    audit: Audit

    async def submit(self, bundle: Path) -> Envelope[EventData]:
        """Commit a bundle.submitted event to the producer's outbox."""
        async with (
            self.producer.require().pool.acquire() as conn,
            emitting(conn, self.producer.source) as out,
        ):
            return out.emit(
                SUBJECT, BundleSubmitted(bundle_uri=bundle.as_uri(), submitted_by="demo")
            )

    @property
    def wire(self) -> str:
        """The submission subject on the wire."""
        return self.producer.namespace.wire(SUBJECT)


def demo_parties(ns: Namespace) -> dict[str, Party]:
    """The NATS identities of the demo's in-process producer and consumer."""
    streams = stream_names(ns)
    return {
        PRODUCER: Party(sends=(SUBJECT,), streams=streams),
        CONSUMER: Party(
            consumes=(
                Durable(ns.stream("BUNDLES"), ns.durable("demo-audit")),
                Durable(ns.stream("ADVISORIES"), ns.durable(watcher_durable("audit"))),
            ),
            dead_letters=(SUBJECT,),
            streams=streams,
        ),
    }


def _settings(stack: Stack, identity: str, db_role: str, **fields: Any) -> DemoSettings:
    """A participant's settings: its NATS identity and its own database role, like a service
    (``Stack.nats_env``, ``Stack.database_env``)."""
    access = stack.nats_client(identity)
    return DemoSettings(
        nats_url=",".join(access.servers),
        nats_user=access.user,
        nats_password_file=access.password_file,
        nats_ca_file=access.ca_file,
        database_url=stack.database_env(db_role)["LOCKSTEP_DATABASE_URL"],
        log_json=False,
        **fields,
    )


async def _event_path(console: Console, stack: Stack, *, bundle: Path) -> None:
    audit = Audit(console)
    p = Participants(
        ServiceApp("cli", _settings(stack, PRODUCER, "demo_cli", db_schema="demo_cli")),
        ServiceApp(
            "audit",
            _settings(
                stack,
                CONSUMER,
                "demo_audit",
                db_schema="demo_audit",
                consumer_retry_backoff_s=(0.1,),
            ),
            subscriptions=[
                Subscription(
                    "demo-audit",
                    "BUNDLES",
                    (SUBJECT,),
                    handlers=(On(BundleSubmitted, audit.handle),),
                )
            ],
        ),
        audit,
    )
    # Streams and consumers are the admin's to create; each participant then only reads them.
    await provision_topology(
        stack.nats_client(ADMIN), p.producer.namespace, [p.producer, p.consumer]
    )
    await p.producer.start()
    await p.consumer.start()
    try:
        async with p.consumer.require().pool.acquire() as conn:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS audit_log (event_id uuid PRIMARY KEY, bundle_uri text)"
            )
        env = await _journey(console, p, bundle)
        await _duplicate(console, p, env)
        await _malformed(console, p)
        await _attestation(console, p, bundle)
    finally:
        await p.consumer.stop()
        await p.producer.stop()


async def _journey(console: Console, p: Participants, bundle: Path) -> Envelope[EventData]:
    console.rule("one event, outbox -> relay -> JetStream -> inbox")
    env = await p.submit(bundle)
    produced = p.producer.require()
    console.print(f"  [green]1.[/] committed to the outbox: {env.type} {env.event_id}")
    await until(lambda: _published(produced.pool, env.event_id), "the relay to publish")
    stream = p.producer.namespace.stream("BUNDLES")
    stored = await p.consumer.require().js.get_last_msg(stream, p.wire)
    msg_id = (stored.headers or {}).get("Nats-Msg-Id")
    console.print(
        f"  [green]2.[/] relay published it: stream {stream} seq {stored.seq}, subject {p.wire}"
    )
    console.print(f"  [green]3.[/] Nats-Msg-Id = {msg_id} (the event id: JetStream dedups on it)")
    await until(lambda: _value(p.audit.applied == 1), "the consumer to apply it")
    console.print(
        f"  [green]4.[/] consumer {p.consumer.namespace.durable('demo-audit')} applied it: "
        "inbox id claimed and audit row written in one transaction, then acked"
    )
    return env


async def _duplicate(console: Console, p: Participants, env: Envelope[EventData]) -> None:
    console.rule("the same event again, with a new Nats-Msg-Id (as if past the duplicate window)")
    js = p.producer.require().js
    await js.publish(p.wire, env.to_json(), headers={"Nats-Msg-Id": f"{env.event_id}-again"})
    await until(lambda: _settled(p.consumer), "the duplicate to be acknowledged")
    rows = await p.consumer.require().pool.fetchval("SELECT count(*) FROM audit_log")
    console.print(f"  delivered twice, applied {p.audit.applied} time(s); audit rows: {rows}")


async def _malformed(console: Console, p: Participants) -> None:
    console.rule("a malformed message")
    js = p.producer.require().js
    await js.publish(p.wire, b'{"type": "lockstep.bundle.submitted", "schemaversion": 7}')
    letter = await until(lambda: _dead_letter(p.consumer), "the dead letter")
    console.print(f"  dead-lettered ({letter['error_kind']}): {letter['reason']}")
    console.print(f"  copy published on {p.producer.namespace.wire(subjects.dead_letter(SUBJECT))}")


async def _attestation(console: Console, p: Participants, bundle: Path) -> None:
    console.rule("the attest service verified the submitted bundle")
    js = p.consumer.require().js  # the identity allowed to read the BUNDLES stream
    verdict = await until(lambda: _last(js, p.producer, subjects.bundle_attested()), "attested", 60)
    data = verdict["data"]
    console.print(
        f"  bundle.attested: {data['bundle_id']} {data['bundle_version']}, stack hash "
        f"{data['stack_hash'][:16]}..., all {len(data['checks'])} checks passed"
    )
    tampered = bundle.parent / "tampered"
    shutil.copytree(bundle, tampered, dirs_exist_ok=True)
    with (tampered / "images" / "psu.bin").open("r+b") as f:
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0xFF]))  # changed for sure (writing 0 may change nothing)
    await p.submit(tampered)
    rejected = await until(
        lambda: _last(js, p.producer, subjects.bundle_rejected()), "rejected", 60
    )
    failed = next(c for c in rejected["data"]["checks"] if c["result"] == "fail")
    console.print(
        f"  one byte changed in images/psu.bin -> bundle.rejected, {failed['check']} check: "
        f"{failed['reason'][:60]}..."
    )


def _log_to(path: Path) -> None:
    """Keep the in-process participants' logs out of the demo's output."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().handlers[:] = [handler]
    logging.getLogger().setLevel(logging.INFO)


async def _last(js: Any, app: ServiceApp, subject: str) -> dict[str, Any] | None:
    try:
        msg = await js.get_last_msg(app.namespace.stream("BUNDLES"), app.namespace.wire(subject))
    except nats.js.errors.NotFoundError:
        return None
    return dict(json.loads(msg.data))


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
