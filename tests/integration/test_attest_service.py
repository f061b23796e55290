"""The attest service against real NATS and PostgreSQL: submit -> job -> verdict -> event."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from lockstep_attest.adapters.repository import PostgresStore
from lockstep_attest.app import create_app
from lockstep_attest.settings import Settings
from lockstep_attest.store import Job
from lockstep_attest.testing.bundles import Kit, make_kit
from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.events.v1 import BundleSubmitted
from lockstep_common.service import ServiceApp
from lockstep_common.vocabulary import Component
from tests.support import emit, make_app, scalar

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Kit:
    return make_kit(tmp_path_factory.mktemp("kit"))


def attest_app(servers: Any, namespace: str, trust: Path | None) -> ServiceApp:
    return create_app(
        Settings(
            nats_url=servers.nats_url,
            database_url=servers.database_url,
            namespace=namespace,
            db_schema=f"{namespace}_attest",
            trust_store=trust,
            bundle_roots=[Path(tempfile.gettempdir())],  # pytest's tmp dirs hold the bundles
            worker_poll_s=0.05,
            consumer_fetch_timeout_s=0.2,
            relay_poll_s=0.2,
            log_json=False,
        )
    )


def store(app: ServiceApp) -> PostgresStore:
    return PostgresStore(app.require().pool, app.source)


async def verdicts(app: ServiceApp) -> list[asyncpg.Record]:
    async with app.require().pool.acquire() as conn:
        return list(await conn.fetch("SELECT * FROM verdicts ORDER BY id"))


async def count(app: ServiceApp, n: int) -> bool:
    return len(await verdicts(app)) >= n


async def stored(app: ServiceApp, base: str) -> int:
    info = await app.require().js.stream_info(app.namespace.stream(base))
    return int(info.state.messages)


def submitted(path: Path) -> BundleSubmitted:
    return BundleSubmitted(bundle_uri=path.as_uri(), submitted_by="ci-job-812")


async def test_submitted_bundle_is_attested_with_an_auditable_verdict(
    servers: Any, namespace: str, kit: Kit, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    app = attest_app(servers, namespace, kit.trust)
    await app.start()
    producer = make_app(servers, namespace, "cli")
    await producer.start()
    try:
        await emit(producer, subjects.bundle_submitted(), [submitted(kit.bundle)])
        await until(lambda: count(app, 1), what="a verdict")
        (verdict,) = await verdicts(app)
        assert verdict["accepted"] and verdict["submitted_by"] == "ci-job-812"
        assert verdict["stack_hash"] == kit.manifest.stack_hash()
        assert verdict["read_ms"] > 0
        async with store(app).transaction() as tx:
            checks = await tx.checks_of(verdict["id"])
        assert {c.check for c in checks} >= {"signature", "digest", "pldm", "rim", "safe", "sbom"}
        # The event reaches the BUNDLES stream through the outbox.
        await until(lambda: _eq(stored(app, "BUNDLES"), 2), what="bundle.attested published")
        msg = await app.require().js.get_last_msg(
            app.namespace.stream("BUNDLES"), app.namespace.wire(subjects.bundle_attested())
        )
        assert msg.data is not None
        body = json.loads(msg.data)
        assert body["type"] == "lockstep.bundle.attested"
        assert body["data"]["stack_hash"] == kit.manifest.stack_hash()
        # What the planner orders and the updater fetches: every image, as the manifest says.
        assert body["data"]["bundle_uri"] == submitted(kit.bundle).bundle_uri
        images = {(c["profile"], c["component"]): c for c in body["data"]["components"]}
        assert set(images) == {
            (p, c.value) for p, comps in kit.manifest.profiles.items() for c in comps
        }
        for (profile, component), c in images.items():
            entry = kit.manifest.profiles[profile][Component(component)]
            assert (c["version"], c["sha384"], c["banks"]) == (
                entry.version,
                entry.sha384,
                entry.banks.value,
            )

        # Identical bytes again: the verdict is reused. One changed byte: verified again.
        await emit(producer, subjects.bundle_submitted(), [submitted(kit.bundle)])
        await until(lambda: count(app, 2), what="a second verdict")
        assert (await verdicts(app))[1]["reused_from"] == verdict["id"]
        tampered = tmp_path / "tampered"
        shutil.copytree(kit.bundle, tampered)
        raw = bytearray((tampered / "images" / "psu.bin").read_bytes())
        raw[100] ^= 0x01
        (tampered / "images" / "psu.bin").write_bytes(bytes(raw))
        await emit(producer, subjects.bundle_submitted(), [submitted(tampered)])
        await until(lambda: count(app, 3), what="a third verdict")
        third = (await verdicts(app))[2]
        assert not third["accepted"] and third["reused_from"] is None
        # Keys never reach the logs: neither PEM blocks nor the signing key's body.
        secret = "".join(kit.signing_key_pem.read_text().splitlines()[1:-1])
        assert "PRIVATE KEY" not in caplog.text and secret[:32] not in caplog.text
    finally:
        await producer.stop()
        await app.stop()


async def _eq(value: Any, expected: int) -> bool:
    return bool(await value == expected)


async def test_without_a_trust_store_every_bundle_is_rejected(
    servers: Any, namespace: str, kit: Kit
) -> None:
    app = attest_app(servers, namespace, None)
    await app.start()
    try:
        async with store(app).transaction() as tx:
            await tx.add_job(uuid.uuid4(), kit.bundle.as_uri(), "me", None)
        await until(lambda: count(app, 1), what="a verdict")
        (verdict,) = await verdicts(app)
        assert not verdict["accepted"]
        reasons = await scalar(app.require().pool, "SELECT reason FROM verdict_checks")
        assert reasons == "no trust store configured: attest fails closed"
    finally:
        await app.stop()


async def test_a_lapsed_lease_is_reclaimed_and_a_superseded_worker_cannot_commit(
    servers: Any, namespace: str, kit: Kit
) -> None:
    app = attest_app(servers, namespace, kit.trust)
    await app.start()
    worker = app._workers[0]
    try:
        pool = app.require().pool
        # Stop the service's own loop from competing: claim by hand below.
        async with pool.acquire() as conn:
            await conn.execute(
                "INSERT INTO jobs (event_id, bundle_uri, submitted_by, state, lease_token,"
                " lease_until, attempts) VALUES (gen_random_uuid(), $1, 'me', 'running', 7,"
                " now() - interval '1 second', 1)",
                kit.bundle.as_uri(),
            )
        # The crashed holder's lease lapsed: the live loop re-claims it (token 8) and finishes.
        await until(lambda: count(app, 1), what="the lapsed job finished")
        token = await scalar(pool, "SELECT lease_token FROM jobs")
        assert token == 8
        # The old holder (token 7) wakes up and tries to commit: the fence refuses it.
        stale = Job(
            id=1,
            token=7,
            attempts=1,
            bundle_uri=kit.bundle.as_uri(),
            submitted_by="me",
            correlation_id=None,
        )
        await worker.process(store(app), stale)  # type: ignore[attr-defined]
        assert len(await verdicts(app)) == 1
    finally:
        await app.stop()


async def test_a_submission_naming_a_fifo_or_a_file_outside_the_roots_is_rejected_not_hung(
    servers: Any, namespace: str, kit: Kit, tmp_path: Path
) -> None:
    # A FIFO blocked the worker for good on open(); /etc/passwd was read and reported on.
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    app = attest_app(servers, namespace, kit.trust)
    await app.start()
    producer = make_app(servers, namespace, "cli")
    await producer.start()
    try:
        hostile = [submitted(pipe), submitted(Path("/etc/passwd")), submitted(kit.bundle)]
        await emit(producer, subjects.bundle_submitted(), hostile)
        await until(lambda: count(app, 3), what="three verdicts, the good bundle's included")
        fifo, outside, good = await verdicts(app)
        assert not fifo["accepted"] and not outside["accepted"] and good["accepted"]
        async with store(app).transaction() as tx:
            reasons = [(await tx.checks_of(v["id"]))[0].reason for v in (fifo, outside)]
        assert "not a regular file or directory" in reasons[0]
        assert "outside the configured bundle roots" in reasons[1]
    finally:
        await producer.stop()
        await app.stop()
