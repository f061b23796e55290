"""Fabric domains against a running planner (real NATS + PostgreSQL) and the simulator's
scheduler API (seed 002; issue 10, deliverable 6): a domain a simulated job occupies is deferred
out of the switch-firmware rollout and updated once the job ends; ``lockstep fabric pin`` is
refused while a domain is PROVISIONING; ``list`` and ``show`` say what the planner keeps; bad
input is one line and exit 2."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from aiohttp import web
from typer.testing import CliRunner

from lockstep_cli.main import app as cli_app
from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.errors import TransientError
from lockstep_common.events.v1 import BundleAttested
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_planner.adapters.scheduler_jobs import SchedulerJobs
from lockstep_planner.app import create_app
from lockstep_planner.handlers import rollout_id_of
from lockstep_planner.testing.kit import NEW_DRIVER, attested, fleet_node, image, intent
from lockstep_sim.scheduler.http import make_app
from lockstep_sim.scheduler.model import Scheduler
from tests.integration.planner_service.conftest import (
    Inventory,
    Planner,
    approvers,
    planner_settings,
    quick_policy,
)
from tests.integration.planner_service.test_rollouts import finish_wave

pytestmark = pytest.mark.integration
NODES = [f"n{i:03d}" for i in range(20)]
NOT_A_REF = "not a bundle reference (ID[@VERSION])"


def switch_bundle(version: str = "1.20.3") -> BundleAttested:
    bundle = attested(
        image(Component.DRIVER, NEW_DRIVER),
        image(Component.GPU_GSP, NEW_DRIVER),
        image(Component.NVSWITCH, version, activation="reset"),
    )
    return bundle.model_copy(update={"bundle_id": "gb200-fabric", "bundle_version": version})


@dataclasses.dataclass
class Rig:
    planner: Planner
    scheduler: Scheduler

    async def domain(self, name: str) -> dict[str, Any]:
        code, out = await cli("fabric", "show", name, "--json")
        assert code == 0, out
        doc: dict[str, Any] = json.loads(out)
        return doc

    async def attest(self, bundle: BundleAttested) -> None:
        await self.planner.publish(subjects.bundle_attested(), bundle)

        async def known() -> bool:
            pool = self.planner.app.require().pool
            return bool(
                await pool.fetchval(
                    "SELECT count(*) FROM bundles WHERE stack_hash = $1", bundle.stack_hash
                )
            )

        await until(known, what="bundle recorded")


@pytest.fixture
async def rig(
    servers: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    """The planner over 20 nodes in five fabric domains of four (d0: n000-n003, ...), asking
    the simulator's scheduler API which nodes run a job."""
    scheduler = Scheduler({"p0": NODES})
    runner = web.AppRunner(make_app(scheduler))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    keys = approvers(tmp_path)
    settings = planner_settings(
        servers, namespace, quick_policy(tmp_path / "classes.yaml"), tmp_path / "trust"
    ).model_copy(update={"scheduler_url": f"http://127.0.0.1:{port}", "fabric_sync_s": 0.1})
    for name, value in (
        ("LOCKSTEP_NATS_URL", settings.nats_url),
        ("LOCKSTEP_DATABASE_URL", settings.database_url),
        ("LOCKSTEP_NAMESPACE", settings.namespace),
        ("LOCKSTEP_PLANNER_DB_SCHEMA", settings.db_schema),
    ):
        monkeypatch.setenv(name, str(value))
    nc = await nats.connect(servers.nats_url)
    ns = Namespace(namespace)
    inventory = Inventory([fleet_node(i, fabric_domain=f"d{i // 4}") for i in range(20)])
    sub = await nc.subscribe(ns.wire(subjects.fleet_query()), cb=inventory.answer)
    app = create_app(settings)
    await app.start()
    harness = Planner(app, nc, ns, inventory, settings, keys)
    try:
        yield Rig(harness, scheduler)
    finally:
        await sub.unsubscribe()
        await nc.close()
        await harness.app.stop()
        await runner.cleanup()


async def cli(*args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(CliRunner().invoke, cli_app, list(args))
    return result.exit_code, result.output


async def lifecycle_is(rig: Rig, domain: str, lifecycle: str) -> None:
    async def there() -> bool:
        pool = rig.planner.app.require().pool
        found = await pool.fetchval(
            "SELECT lifecycle FROM fabric_domains WHERE domain = $1", domain
        )
        return bool(found == lifecycle)

    await until(there, what=f"{domain} {lifecycle}")


async def pass_waves_before(planner: Planner, rollout_id: str, last: int) -> None:
    """Complete and pass every wave before wave ``last``, each once it is released."""
    for number in range(last):
        [*_, wave] = await planner.wait_for("wave.planned.", number + 1)
        assert wave["wave"] == number
        await finish_wave(planner, rollout_id, wave)


async def test_an_occupied_domain_is_deferred_and_updated_once_its_job_ends(rig: Rig) -> None:
    planner = rig.planner
    job = rig.scheduler.occupy(["n005", "n006"], duration_s=1e9, name="llm-pretrain")
    await lifecycle_is(rig, "d1", "OCCUPIED")
    bundle = switch_bundle()
    await rig.attest(bundle)
    data = intent(bundle, change_class=ChangeClass.ROUTINE, approval_ref="CHG-9")
    rollout_id = rollout_id_of(data.intent_id)
    await planner.publish(subjects.intent_submitted(), data)
    [planned] = await planner.wait_for("rollout.planned.")
    deferred = planned["waves"][-1]
    assert deferred["node_ids"] == ["n004", "n005", "n006", "n007"]
    assert all("n005" not in w["node_ids"] for w in planned["waves"][:-1])

    code, out = await cli(
        "rollout", "approve", rollout_id, "--key", str(planner.keys["alice"]), "--as", "alice"
    )
    assert code == 0, out
    [canary] = await planner.wait_for("wave.planned.")
    busy = f"d{int(canary['node_ids'][0][1:]) // 4}"
    assert (await rig.domain(busy))["lifecycle"] == "PROVISIONING"

    # A pin while PROVISIONING: OCI's 409, one line and a non-zero exit.
    await rig.attest(switch_bundle("1.21.0"))
    code, out = await cli("fabric", "pin", busy, "--bundle", "gb200-fabric@1.21.0")
    assert code == 1
    assert out.strip() == (
        f"error: fabric domain {busy} is PROVISIONING: cannot pin gb200-fabric@1.21.0 until "
        "it is AVAILABLE"
    )

    await pass_waves_before(planner, rollout_id, deferred["number"])

    # Every other wave passed; d1's wave waits while the job runs.
    async def waiting() -> dict[str, Any] | None:
        _, out = await cli("rollout", "status", rollout_id, "--json")
        doc: dict[str, Any] = json.loads(out)
        return doc if "waits" in doc["reason"] else None

    status = await until(waiting, what="the deferred wave waiting")
    assert status["state"] == "running"
    assert status["deferred"][str(deferred["number"])]["domain"] == "d1"
    assert status["waves"][-1]["state"] == "pending"
    code, out = await cli("rollout", "status", rollout_id)
    assert "pending (deferred: d1)" in out
    d1 = await rig.domain("d1")
    assert (d1["lifecycle"], d1["update_state"], d1["target"]) == (
        "OCCUPIED",
        "WILL_UPDATE",
        "gb200-fabric@1.20.3",
    )
    assert len(await planner.emitted("wave.planned.")) == deferred["number"]

    # A restart while the wave waits loses nothing: the next scheduler poll says what runs.
    await planner.restart()
    rig.scheduler.finish_job(job.job_id)
    waves = await planner.wait_for("wave.planned.", deferred["number"] + 1)
    assert waves[-1]["node_ids"] == deferred["node_ids"]
    assert (await rig.domain("d1"))["lifecycle"] == "PROVISIONING"
    await finish_wave(planner, rollout_id, waves[-1])
    await planner.wait_for("rollout.completed.")
    # The same verdict again (a redelivery) changes nothing more.
    await finish_wave(planner, rollout_id, waves[-1])

    await fabric_domains_on_the_bundle(rig)


async def fabric_domains_on_the_bundle(rig: Rig) -> None:
    """After the rollout: every domain runs its target, and d1's history tells how."""
    code, out = await cli("fabric", "list", "--json")
    assert code == 0, out
    listed = {d["domain"]: d for d in json.loads(out)["domains"]}
    assert sorted(listed) == ["d0", "d1", "d2", "d3", "d4"]
    for doc in listed.values():
        assert (doc["current"], doc["target"]) == ("gb200-fabric@1.20.3", "gb200-fabric@1.20.3")
        assert (doc["lifecycle"], doc["update_state"]) == ("AVAILABLE", "NO_UPDATE")
        assert doc["rollout_id"] is None
    d1 = await rig.domain("d1")
    actions = [h["action"] for h in d1["history"]]
    assert actions == ["discovered", "occupied", "pinned", "available", "provisioning", "updated"]
    code, out = await cli("fabric", "list")
    assert code == 0 and "gb200-fabric@1.20.3" in out and "NO_UPDATE" in out
    code, out = await cli("rollout", "audit", "fabric:d1", "--json")
    assert code == 0 and [a["actor"] for a in json.loads(out)][:2] == ["inventory", "scheduler"]


async def test_a_dry_run_shows_the_occupied_domain_deferred_with_the_reason(rig: Rig) -> None:
    rig.scheduler.occupy(["n009"], duration_s=1e9, name="eval")
    await lifecycle_is(rig, "d2", "OCCUPIED")
    await rig.attest(switch_bundle())
    code, out = await cli(
        "rollout", "plan", "--bundle", "gb200-fabric", "--scope", "site=site-a",
        "--class", "routine",
    )  # fmt: skip
    assert code == 0, out
    flat = " ".join(out.split())
    assert "excluded: 4 node(s): deferred: fabric domain d2 is OCCUPIED by a job" in flat
    assert "when free" in flat
    assert (await rig.domain("d2"))["target"] is None  # a dry run pins nothing


async def test_pin_sets_the_target_and_bad_input_is_one_line_and_exit_2(rig: Rig) -> None:
    await lifecycle_is(rig, "d0", "AVAILABLE")
    await rig.attest(switch_bundle())
    code, out = await cli("fabric", "pin", "d0", "--bundle", "gb200-fabric", "--by", "bob")
    assert (code, out.strip()) == (0, "d0: pinned to gb200-fabric")
    d0 = await rig.domain("d0")
    assert (d0["target"], d0["update_state"], d0["changed_by"]) == (
        "gb200-fabric@1.20.3",
        "WILL_UPDATE",
        "bob",
    )
    assert d0["update_reason"] == "pinned to gb200-fabric@1.20.3; waits for a rollout of it"
    assert d0["history"][-1]["action"] == "pinned"
    code, out = await cli("fabric", "pin", "d0", "--bundle", "gb200-fabric@1.20.3", "--by", "bob")
    assert (code, out.strip()) == (0, "d0: already pinned to gb200-fabric@1.20.3")
    code, out = await cli("fabric", "show", "d0")
    assert code == 0 and "pinned to" in out and "changed by bob" in out

    for args, line in (
        (("pin", "d9", "--bundle", "gb200-fabric"), "no fabric domain d9"),
        (
            ("pin", "d0", "--bundle", "gb200-fabric@"),
            f"--bundle 'gb200-fabric@': {NOT_A_REF}",
        ),
        (
            ("pin", "d0", "--bundle", "a@b@c"),
            f"--bundle 'a@b@c': {NOT_A_REF}",
        ),
        (("pin", "d0", "--bundle", "nope@1"), "--bundle: no attested bundle nope@1"),
        (("show", "d9"), "no fabric domain d9"),
        (("show", "d[red]9"), "no fabric domain d[red]9"),  # printed as given, not as markup
    ):
        code, out = await cli("fabric", *args)
        assert (code, out.strip()) == (2, f"error: {line}"), args
        assert "Traceback" not in out


async def test_a_scheduler_that_does_not_answer_is_transient(rig: Rig) -> None:
    with pytest.raises(TransientError, match=r"GET http://127\.0\.0\.1:9/scheduler/jobs"):
        await SchedulerJobs("http://127.0.0.1:9", timeout_s=2).busy_nodes()
    # The running planner's own scheduler answers with the jobs' nodes.
    rig.scheduler.occupy(["n001", "n002"], duration_s=1e9)
    url = rig.planner.settings.scheduler_url
    assert await SchedulerJobs(url).busy_nodes() == {"n001", "n002"}


async def test_list_and_show_are_asked_of_the_planner_without_a_database(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens there: fabric list and show come from the planner over the bus.
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")

    async def listed() -> list[dict[str, Any]]:
        code, out = await cli("fabric", "list", "--json")
        assert code == 0, out
        domains: list[dict[str, Any]] = json.loads(out)["domains"]
        return domains if len(domains) == 5 else []

    domains = await until(listed, what="the planner's five fabric domains")
    assert [d["domain"] for d in domains] == ["d0", "d1", "d2", "d3", "d4"]
    assert domains[0]["nodes"] == ["n000", "n001", "n002", "n003"]
    d0 = await rig.domain("d0")
    assert d0["domain"] == "d0" and d0["history"][0]["action"] == "discovered"
    code, out = await cli("fabric", "show", "d9")
    assert code == 2 and "no fabric domain d9" in out
    # A pin too: checked, queued and carried out by the planner; its outcome is the reply.
    await rig.attest(switch_bundle())
    code, out = await cli("fabric", "pin", "d2", "--bundle", "gb200-fabric", "--by", "bob")
    assert (code, out.strip()) == (0, "d2: pinned to gb200-fabric"), out
    assert (await rig.domain("d2"))["changed_by"] == "bob"
    rows = await rig.planner.app.require().pool.fetch(
        "SELECT identity, command, outcome FROM operator_requests"
    )
    assert [tuple(r) for r in rows] == [("cli", "fabric.pin", "done")]
