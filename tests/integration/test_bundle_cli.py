"""``lockstep bundle submit|list|show`` against a real attest service (real NATS + PostgreSQL),
which answers over the bus: the CLI has no reachable database here."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lockstep_attest.app import create_app
from lockstep_attest.settings import Settings
from lockstep_attest.testing.bundles import Kit, make_kit
from lockstep_cli.main import app as cli_app
from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import (
    BundleListAnswered,
    BundleListRequested,
    BundleSubmitRequested,
    OpsRefused,
)
from lockstep_common.identities import READER
from lockstep_common.service import ServiceApp
from tests.support import scalar

pytestmark = pytest.mark.integration


@pytest.fixture
async def attest(
    servers: Any, namespace: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Any:
    kit = make_kit(tmp_path / "roots")
    settings = Settings(
        nats_url=servers.nats_url,
        database_url=servers.database_url,
        namespace=namespace,
        db_schema=f"{namespace}_attest",
        trust_store=kit.trust,
        bundle_roots=[tmp_path / "roots"],
        worker_poll_s=0.05,
        consumer_fetch_timeout_s=0.2,
        relay_poll_s=0.2,
        log_json=False,
    )
    service = create_app(settings)
    await service.start()
    for name, value in (
        ("LOCKSTEP_NATS_URL", servers.nats_url),
        # Nothing listens there: the commands ask the service over the bus, never the table.
        ("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none"),
        ("LOCKSTEP_NAMESPACE", namespace),
        ("LOCKSTEP_DATA_DIR", str(tmp_path / "no-stack")),
    ):
        monkeypatch.setenv(name, value)
    yield service, kit
    await service.stop()


async def _cli(*args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(CliRunner().invoke, cli_app, list(args))
    return result.exit_code, result.output


async def _verdict(job: int) -> dict[str, Any] | None:
    _, out = await _cli("bundle", "show", str(job), "--json")  # exit 1 when rejected
    answer: dict[str, Any] = json.loads(out)
    return answer if answer["bundle"]["state"] in ("attested", "rejected") else None


async def _jobs(service: ServiceApp) -> int:
    return int(await scalar(service.require().pool, "SELECT count(*) FROM jobs") or 0)


async def test_submit_then_list_and_show_every_check(attest: tuple[ServiceApp, Kit]) -> None:
    service, kit = attest
    code, out = await _cli("bundle", "submit", str(kit.bundle), "--json")
    assert code == 0, out
    good = json.loads(out)["job_id"]
    shown = await until(lambda: _verdict(good), "the good bundle's verdict")
    assert shown["bundle"]["state"] == "attested" and shown["bundle"]["submitted_by"] == "cli"
    assert shown["bundle"]["stack_hash"] == kit.manifest.stack_hash()
    assert {c["check"] for c in shown["checks"]} >= {"signature", "digest", "rim", "sbom"}
    code, out = await _cli("bundle", "show", str(good))
    assert code == 0 and "attested" in out and "signature" in out, out

    # One changed byte in an image: rejected, and show says which check failed and why.
    tampered = kit.bundle.parent / "tampered"
    shutil.copytree(kit.bundle, tampered)
    raw = bytearray((tampered / "images" / "psu.bin").read_bytes())
    raw[100] ^= 0x01
    (tampered / "images" / "psu.bin").write_bytes(bytes(raw))
    # --wait: the verdict as show prints it, exit 1 for a rejection.
    args = ("bundle", "submit", str(tampered), "--note", "tampered on purpose")
    code, out = await _cli(*args, "--wait", "120", "--json")
    assert code == 1, out
    rejected = json.loads(out)
    bad = rejected["bundle"]["job_id"]
    assert bad == good + 1 and rejected["bundle"]["state"] == "rejected"
    failed = [c for c in rejected["checks"] if c["result"] == "fail"]
    assert failed and "psu.bin" in rejected["bundle"]["reason"]
    code, out = await _cli("bundle", "show", str(bad))
    assert code == 1 and "rejected" in out and "fail" in out, out

    code, out = await _cli("bundle", "list", "--json")
    assert code == 0, out
    listed = json.loads(out)
    assert [b["job_id"] for b in listed] == [bad, good]  # newest first
    assert [b["state"] for b in listed] == ["rejected", "attested"]
    code, out = await _cli("bundle", "list", "--limit", "1", "--json")
    assert [b["job_id"] for b in json.loads(out)] == [bad]

    # The audit: who submitted what, as the server authenticated them.
    rows = await service.require().pool.fetch(
        "SELECT identity, command, outcome FROM operator_requests ORDER BY asked_at"
    )
    assert [tuple(r) for r in rows] == [("cli", "bundle.submit", "done")] * 2


@pytest.mark.parametrize(
    ("args", "says", "code"),
    [
        (("bundle", "submit", "/etc"), "outside the configured bundle roots", 2),
        (("bundle", "submit", "/nonexistent/bundle"), "cannot read", 2),
        (("bundle", "submit", "https://example.invalid/b.tar"), "unsupported bundle URI", 2),
        (("bundle", "show", "999999"), "no bundle submission 999999", 2),
        (("bundle", "show", "0"), "greater than or equal to 1", 2),
    ],
)
async def test_bad_input_is_one_line_and_records_no_job(
    attest: tuple[ServiceApp, Kit], args: tuple[str, ...], says: str, code: int
) -> None:
    service, _ = attest
    got, out = await _cli(*args)
    assert got == code and says in out and "Traceback" not in out, out
    assert await _jobs(service) == 0


async def test_the_reader_lists_bundles_but_may_not_submit(
    attest: tuple[ServiceApp, Kit],
) -> None:
    service, kit = attest
    nc = service.require().nc

    async def ask(identity: str, command: str, data: EventData) -> EventData:
        subject = service.namespace.wire(subjects.ops_request(identity, "attest", command))
        reply = await nc.request(subject, make_envelope(data, source="/t").to_json(), timeout=10)
        return REGISTRY.decode(reply.data, max_bytes=1 << 22).data

    refused = await ask(READER, "bundle.submit", BundleSubmitRequested(bundle_uri=str(kit.bundle)))
    assert isinstance(refused, OpsRefused) and refused.kind == "forbidden"
    assert await _jobs(service) == 0
    row = await service.require().pool.fetchrow("SELECT identity, outcome FROM operator_requests")
    assert row is not None and (row["identity"], row["outcome"]) == (READER, "refused")
    listed = await ask(READER, "bundle.list", BundleListRequested())
    assert isinstance(listed, BundleListAnswered) and listed.bundles == ()
