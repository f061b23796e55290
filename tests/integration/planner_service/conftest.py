"""A running planner service (real NATS + PostgreSQL), a stand-in inventory answering
``fleet.query`` in small pages, and helpers to publish events and read what the planner
committed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import FleetNode, FleetQueryAnswered, FleetQueryRequested
from lockstep_common.provenance import source_for
from lockstep_common.service import ServiceApp
from lockstep_common.subjects import Namespace
from lockstep_planner.app import create_app
from lockstep_planner.settings import Settings
from lockstep_planner.testing.kit import fleet_node

PAGE = 7  # the stand-in inventory answers at most this many nodes per page, so paging is used


def quick_policy(path: Path) -> Path:
    """The packaged policy with every soak at zero: the tests drive the gates."""
    doc = yaml.safe_load(
        resources.files("lockstep_planner").joinpath("data/change_classes.yaml").read_bytes()
    )
    for cls in doc["classes"].values():
        cls.update(canary_soak_s=0, layer_soak_s=0, wave_soak_s=0)
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass
class Inventory:
    """Answers fleet.query from ``nodes``, ``PAGE`` at a time, counting the requests."""

    nodes: list[FleetNode]
    asked: int = 0
    pages: list[int] = field(default_factory=list)

    silent: bool = False
    """Answer nothing (an inventory that is down)."""

    async def answer(self, msg: Msg) -> None:
        if self.silent:
            return
        self.asked += 1
        request = REGISTRY.decode(msg.data, max_bytes=1 << 20).data
        assert isinstance(request, FleetQueryRequested)
        rest = [n for n in self.nodes if request.after is None or n.node_id > request.after]
        page = rest[: min(PAGE, request.limit)]
        self.pages.append(len(page))
        more = len(rest) > len(page)
        reply = FleetQueryAnswered(
            nodes=tuple(page), next_after=page[-1].node_id if more and page else None
        )
        await msg.respond(make_envelope(reply, source="/test-inventory").to_json())


@dataclass
class Planner:
    """The service, a client on its namespace, and the stand-in inventory."""

    app: ServiceApp
    nc: NatsClient
    ns: Namespace
    inventory: Inventory
    settings: Settings
    keys: dict[str, Path]
    """Approver -> private key file (their public keys are the service's trust store)."""

    async def publish(self, subject: str, data: EventData) -> Any:
        env = make_envelope(data, source=source_for(data))
        await self.nc.jetstream().publish(
            self.ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
        )
        return env

    async def emitted(self, prefix: str) -> list[dict[str, Any]]:
        """The data of every event the planner committed on subjects starting ``prefix``."""
        rows = await self.app.require().pool.fetch(
            "SELECT payload FROM outbox WHERE subject LIKE $1 ORDER BY id", prefix + "%"
        )
        return [json.loads(r["payload"])["data"] for r in rows]

    async def wait_for(self, prefix: str, count: int = 1) -> list[dict[str, Any]]:
        async def enough() -> list[dict[str, Any]] | None:
            found = await self.emitted(prefix)
            return found if len(found) >= count else None

        return await until(enough, what=f"{count} event(s) on {prefix}")

    async def state(self, rollout_id: str) -> str | None:
        value: str | None = await self.app.require().pool.fetchval(
            "SELECT state FROM rollouts WHERE rollout_id = $1", rollout_id
        )
        return value

    async def restart(self) -> None:
        await self.app.stop()
        self.app = create_app(self.settings)
        await self.app.start()


def approvers(directory: Path) -> dict[str, Path]:
    """Alice's and Bob's keys: public halves in ``directory/trust``, private ones returned."""
    trust = directory / "trust"
    trust.mkdir()
    out = {}
    for name in ("alice", "bob"):
        key = Ed25519PrivateKey.generate()
        (trust / f"{name}.pem").write_bytes(
            key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        )
        out[name] = directory / f"{name}.key"
        out[name].write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    return out


def planner_settings(servers: Any, namespace: str, policy: Path, trust: Path) -> Settings:
    return Settings(
        nats_url=servers.nats_url,
        database_url=servers.database_url,
        namespace=namespace,
        db_schema=f"{namespace}_planner",
        policy_file=policy,
        approvers_dir=trust,
        worker_poll_s=0.05,
        consumer_fetch_timeout_s=0.2,
        relay_poll_s=0.1,
        shutdown_grace_s=5,
        log_json=False,
    )


@pytest.fixture
async def planner(servers: Any, namespace: str, tmp_path: Path) -> AsyncIterator[Planner]:
    keys = approvers(tmp_path)
    settings = planner_settings(
        servers, namespace, quick_policy(tmp_path / "classes.yaml"), tmp_path / "trust"
    )
    nc = await nats.connect(servers.nats_url)
    ns = Namespace(namespace)
    inventory = Inventory([fleet_node(i) for i in range(20)])
    sub = await nc.subscribe(ns.wire(subjects.fleet_query()), cb=inventory.answer)
    app = create_app(settings)
    await app.start()
    harness = Planner(app, nc, ns, inventory, settings, keys)
    try:
        yield harness
    finally:
        await sub.unsubscribe()
        await nc.close()
        await harness.app.stop()


def ids(waves: Sequence[dict[str, Any]]) -> list[int]:
    return [w["wave"] for w in waves]
