"""The planner with the real inventory answering fleet.query (a swept, simulated fleet): what
the inventory reports is what the planner plans over."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.envelope import make_envelope
from lockstep_common.provenance import source_for
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_planner.app import create_app
from lockstep_planner.testing.kit import attested, image, intent
from tests.integration.inventory_service.conftest import Harness, harness
from tests.integration.planner_service.conftest import planner_settings, quick_policy

pytestmark = pytest.mark.integration
__all__ = ["harness"]  # the inventory service fixture, used here


async def test_a_rollout_is_planned_over_the_fleet_the_inventory_reports(
    harness: Harness, servers: Any, namespace: str, tmp_path: Path
) -> None:
    await harness.sweep()
    trust = tmp_path / "trust"
    trust.mkdir()
    policy = quick_policy(tmp_path / "c.yaml")
    doc = yaml.safe_load(policy.read_text())
    doc["classes"]["routine"]["approvals"]["count"] = 0  # pre-approved here: no keys needed
    policy.write_text(yaml.safe_dump(doc))
    app = create_app(planner_settings(servers, namespace, policy, trust))
    await app.start()
    try:
        bmc = harness.golden()[Component.BMC]
        bundle = attested(image(Component.BMC, f"{bmc}.1", activation="reset"))
        js = harness.nc.jetstream()
        for subject, data in (
            (subjects.bundle_attested(), bundle),
            (subjects.intent_submitted(), intent(bundle, change_class=ChangeClass.ROUTINE)),
        ):
            env = make_envelope(data, source=source_for(type(data)))
            await js.publish(
                harness.ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
            )
            if subject == subjects.bundle_attested():

                async def known() -> bool:
                    n = await app.require().pool.fetchval("SELECT count(*) FROM bundles")
                    return bool(n)

                await until(known, what="bundle recorded")

        async def decided() -> list[Any] | None:
            rows = await app.require().pool.fetch("SELECT state, reasons FROM intents")
            return [r for r in rows if r["state"] in ("planned", "refused")] or None

        [row] = await until(decided, what="the intent decided")
        assert row["state"] == "planned", row["reasons"]
        nodes = await app.require().pool.fetchval("SELECT count(*) FROM rollout_nodes")
        assert nodes == len(harness.nodes)
        sites = await app.require().pool.fetchval("SELECT plan->'sites' FROM rollouts")
        assert harness.nodes[0].site in sites
        waves = await app.require().pool.fetchval(
            "SELECT count(*) FROM outbox WHERE subject LIKE 'wave.planned.%'"
        )
        assert waves == 1, "the canary is released"
    finally:
        await app.stop()
