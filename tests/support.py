"""Helpers shared by tests (the integration ones mostly: settings, apps, events, a fake clock).

Waiting on an observable outcome: ``lockstep_cli.polling.until``, the demo's and benchmarks'
helper, serves the tests too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from pydantic_settings import SettingsConfigDict

from lockstep_common.consumer import Subscription
from lockstep_common.envelope import Envelope, EventData
from lockstep_common.outbox import emitting
from lockstep_common.provenance import source_for
from lockstep_common.service import ServiceApp
from lockstep_common.settings import ServiceSettings
from lockstep_common.subjects import Namespace


@dataclass
class FakeClock:
    """A monotonic clock that moves only when the test sets ``t``."""

    t: float = 0.0

    def __call__(self) -> float:
        return self.t


class FastSettings(ServiceSettings):
    """Service settings with fast retries, read from no environment variables."""

    model_config = SettingsConfigDict(env_prefix="LOCKSTEP_TEST_SVC_", extra="forbid")


def fast_settings(servers: Any, namespace: str, schema: str, **overrides: Any) -> FastSettings:
    values: dict[str, Any] = {
        "nats_url": servers.nats_url,
        "database_url": servers.database_url,
        "namespace": namespace,
        "db_schema": schema,
        "consumer_fetch_timeout_s": 0.2,
        "consumer_ack_wait_s": 5.0,
        "consumer_max_deliver": 4,
        "consumer_retry_backoff_s": (0.05, 0.1, 0.2),
        "consumer_redelivery_backoff_s": (5.0, 10.0),
        "relay_poll_s": 0.2,
        "shutdown_grace_s": 5.0,
        "log_json": False,
    }
    values.update(overrides)
    return FastSettings(**values)


def make_app(
    servers: Any,
    namespace: str,
    name: str,
    subscriptions: Sequence[Subscription] = (),
    **overrides: Any,
) -> ServiceApp:
    settings = fast_settings(servers, namespace, f"{namespace}_{name}", **overrides)
    return ServiceApp(name, settings, subscriptions=subscriptions)


async def emit(
    app: ServiceApp, subject: str, events: Sequence[EventData]
) -> list[Envelope[EventData]]:
    """Write events to ``app``'s outbox in one transaction, as a state change would; ``app``
    stands in for their producer, whose ``source`` they carry (consumers refuse any other)."""
    sources = {source_for(e) for e in events}
    source = sources.pop() if len(sources) == 1 else app.source
    async with app.require().pool.acquire() as conn, emitting(conn, source) as out:
        return [out.emit(subject, e) for e in events]


async def scalar(pool: asyncpg.Pool, sql: str, *args: Any) -> Any:
    async with pool.acquire() as conn:
        return await conn.fetchval(sql, *args)


async def stored_telemetry(js: JetStreamContext, ns: Namespace) -> list[tuple[str, bytes]]:
    """Every (wire subject, body) in the namespace's TELEMETRY stream, oldest first."""
    stream = ns.stream("TELEMETRY")
    total = (await js.stream_info(stream)).state.messages
    if total == 0:
        return []
    sub = await js.pull_subscribe(
        ns.wire("telemetry.>"),
        stream=stream,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
    )
    out: list[tuple[str, bytes]] = []
    while len(out) < total:
        batch = await sub.fetch(min(total - len(out), 500), timeout=5)
        out.extend((msg.subject, msg.data) for msg in batch)
    await sub.unsubscribe()
    return out
