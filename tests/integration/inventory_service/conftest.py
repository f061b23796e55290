"""A running inventory service (real NATS + PostgreSQL) over an in-process simulated fleet."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient

from lockstep_cli.polling import until
from lockstep_common import canonical, subjects
from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events.v1 import DriftDetected, PinChanged, ScopeSelector
from lockstep_common.provenance import source_for
from lockstep_common.service import ServiceApp
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import Component
from lockstep_inventory import admin
from lockstep_inventory.adapters import registry, state
from lockstep_inventory.app import create_app
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.members import versions_of
from lockstep_inventory.domain.pins import stack_of
from lockstep_inventory.settings import Settings
from lockstep_inventory.sweeping import SweepSummary, run_sweep
from lockstep_redfish.profile import profile_named
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME, SimOptions
from lockstep_sim.simulator import Simulator

SITE = "site-ams1"
SIM = profile_named("lockstep-sim")  # what the simulator's default dialect matches


@dataclass
class Harness:
    """The service, its simulator, a NATS client on the same namespace."""

    app: ServiceApp
    sim: Simulator
    nc: NatsClient
    ns: Namespace
    nodes: list[NodeEntry]

    @property
    def settings(self) -> Settings:
        assert isinstance(self.app.settings, Settings)
        return self.app.settings

    async def sweep(self, **kwargs: Any) -> SweepSummary:
        return await run_sweep(
            self.app.require().pool,
            self.nodes,
            self.settings,
            by="test",
            source=admin.SOURCE,
            rules=packaged_rules(),
            **kwargs,
        )

    async def publish(self, subject: str, data: EventData, **kwargs: Any) -> Any:
        env = make_envelope(data, source=source_for(data), **kwargs)
        js = self.nc.jetstream()
        await js.publish(
            self.ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
        )
        return env

    def golden(self, profile: str = "gb200") -> dict[Component, str]:
        """What the simulator's fleet runs now: the stack to pin."""
        node = next(n for n in self.sim.fleet if n.profile == profile)
        grouped = versions_of({m: c.version for m, c in node.components.items()}, SIM)
        return stack_of(grouped.versions, grouped.conflicts)

    async def pin(self, stack: dict[str, dict[Component, str]], **scope: Any) -> str:
        stack_hash = canonical.stack_hash(stack)
        await self.publish(
            subjects.pin_changed(SITE),
            PinChanged(site=SITE, scope=ScopeSelector(**scope), stack_hash=stack_hash, stack=stack),
        )
        await until(lambda: self._has_pin(stack_hash), what="pin applied")
        return stack_hash

    async def _has_pin(self, stack_hash: str) -> bool:
        async with self.app.require().pool.acquire() as conn:
            return any(p.stack_hash == stack_hash for p in await state.pins(conn))

    async def drift_events(self) -> list[tuple[str, dict[str, Any]]]:
        """(type, data) of every drift event the service committed, in commit order."""
        rows = await self.app.require().pool.fetch(
            "SELECT subject, payload FROM outbox WHERE subject LIKE 'drift.%' ORDER BY id"
        )
        return [
            (
                json.loads(r["payload"])["type"].removeprefix("lockstep."),
                json.loads(r["payload"])["data"],
            )
            for r in rows
        ]

    async def drift_of(self, node_id: str) -> list[tuple[str, str]]:
        async with self.app.require().pool.acquire() as conn:
            row = (await state.drift(conn, [node_id])).get(node_id)
        return [] if row is None else [(str(i.component), str(i.kind)) for i in row.items]


@pytest.fixture
async def harness(
    servers: Any, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    monkeypatch.setenv("LOCKSTEP_TESTBMC_USERNAME", DEFAULT_USERNAME)
    monkeypatch.setenv("LOCKSTEP_TESTBMC_PASSWORD", DEFAULT_PASSWORD)
    settings = Settings(
        nats_url=servers.nats_url,
        database_url=servers.database_url,
        namespace=namespace,
        db_schema=f"{namespace}_inventory",
        sweep_interval_s=0,
        sweep_chunk=2,
        metrics_interval_s=0.2,
        consumer_fetch_timeout_s=0.2,
        relay_poll_s=0.2,
        shutdown_grace_s=5,
        log_json=False,
    )
    async with Simulator(SimOptions(4, "gb200", seed=5, host_base="127.71.0.1", port=0)) as sim:
        app = create_app(settings)
        await app.start()
        nc = await nats.connect(servers.nats_url)
        try:
            nodes = [
                NodeEntry.model_validate(
                    {**n.summary(sim.port), "credentials": "env:LOCKSTEP_TESTBMC"}
                )
                for n in sim.fleet
            ]
            async with app.require().pool.acquire() as conn:
                await registry.import_nodes(conn, nodes)
            yield Harness(app, sim, nc, Namespace(namespace), nodes)
        finally:
            await nc.close()
            await app.stop()


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def detected_kinds(data: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (i["component"], i["kind"])
        for i in DriftDetected.model_validate(data, strict=False).model_dump(mode="json")["items"]
    }
