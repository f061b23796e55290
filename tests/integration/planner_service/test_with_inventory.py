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


async def test_a_rollout_is_planned_over_the_fleet_the_inventory_reports_and_refused_when_too_small(
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
            env = make_envelope(data, source=source_for(data))
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
        # Four simulated nodes over three suppliers: every stratum is too small for the gate's
        # minimum (5 canary and 5 control), so the plan is refused before approval, naming
        # each stratum the inventory reported with its size (issue 31).
        assert row["state"] == "refused", row["reasons"]
        sizes = [int(r.split(" has ")[1].split(" ")[0]) for r in row["reasons"]]
        assert sum(sizes) == len(harness.nodes), row["reasons"]
        assert all(
            "the gate policy's minimum is 5 canary and 5 control" in r for r in row["reasons"]
        )
        assert not await app.require().pool.fetchval("SELECT count(*) FROM rollout_nodes")
    finally:
        await app.stop()


async def test_nodes_differing_only_in_one_nic_familys_firmware_are_strata_of_their_own(
    harness: Harness, servers: Any, namespace: str, tmp_path: Path
) -> None:
    """A GB200 tray's NIC members run two families' firmware, so the inventory reports the NIC
    as a conflict; the planner must still see it, or nodes differing only there collapse into
    one stratum and the canary misses the odd one."""
    by_supplier: dict[str, list[Any]] = {}
    for node in harness.sim.fleet:
        by_supplier.setdefault(node.supplier, []).append(node)
    # Four nodes, three suppliers: some supplier has two; one of those gets an older CX7 image.
    odd = next(nodes for nodes in by_supplier.values() if len(nodes) >= 2)[0]
    odd.components["CX7_0"].version = "28.39.1002"
    await harness.sweep()
    policy = quick_policy(tmp_path / "c.yaml")
    app = create_app(planner_settings(servers, namespace, policy, tmp_path))
    await app.start()
    try:
        bmc = harness.golden()[Component.BMC]
        bundle = attested(image(Component.BMC, f"{bmc}.1", activation="reset"))
        js = harness.nc.jetstream()
        for data in (bundle, intent(bundle, change_class=ChangeClass.ROUTINE, dry_run=True)):
            subject = subjects.bundle_attested() if data is bundle else subjects.intent_submitted()
            env = make_envelope(data, source=source_for(data))
            await js.publish(
                harness.ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
            )
            if data is bundle:

                async def known() -> bool:
                    return bool(await app.require().pool.fetchval("SELECT count(*) FROM bundles"))

                await until(known, what="bundle recorded")

        async def decided() -> Any:
            return await app.require().pool.fetchval(
                "SELECT reasons FROM intents WHERE state = 'refused'"
            )

        # Too small a fleet for the gate to judge any stratum: the refusal names each stratum,
        # the odd NIC firmware's among them (issue 31: refused before approval).
        reasons = await until(decided, what="the dry run refused")
        expected: dict[tuple[str, str], int] = {}
        for node in harness.sim.fleet:
            key = (node.supplier, node.components["CX7_0"].version)
            expected[key] = expected.get(key, 0) + 1
        assert len(reasons) == len(expected), reasons
        odd_supplier = [r for r in reasons if f"/{odd.supplier}/" in r]
        versions = [k for k in expected if k[0] == odd.supplier]
        assert len(odd_supplier) == len(versions) == 2, "the odd NIC firmware: its own stratum"
        assert all(" has 1 node(s) " in r for r in odd_supplier), odd_supplier
    finally:
        await app.stop()
