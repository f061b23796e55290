"""Redfish sweeps through the running service: drift detected once, resolved once, history kept."""

from __future__ import annotations

import logging

import pytest

from lockstep_common.vocabulary import Component

from .conftest import Harness, detected_kinds

pytestmark = pytest.mark.integration


async def test_conforming_fleet_emits_nothing_then_a_silent_revert_is_detected_and_resolved(
    harness: Harness,
) -> None:
    await harness.pin({"gb200": harness.golden()})
    first = await harness.sweep()
    assert first.unreadable == 0 and first.outcome.detected == []
    assert await harness.drift_events() == []

    node = harness.nodes[1].id
    bmc = harness.sim.bmc(node).node.components["FW_BMC_0"]
    good = bmc.version
    bmc.version = "GB200Nvl-24.09-1"  # both BMC members now disagree: one reverted
    second = await harness.sweep()
    assert second.outcome.detected == [node]
    events = await harness.drift_events()
    assert [t for t, _ in events] == ["drift.detected"]
    assert detected_kinds(events[0][1]) == {("bmc", "unexpected")}

    # The same state again: no event (emit on change, never per sweep).
    third = await harness.sweep()
    assert third.outcome.detected == [] and len(await harness.drift_events()) == 1

    bmc.version = good
    fourth = await harness.sweep()
    assert fourth.outcome.resolved == [node]
    assert [t for t, _ in await harness.drift_events()] == ["drift.detected", "drift.resolved"]
    history = await harness.app.require().pool.fetch(
        "SELECT item, old_version, new_version FROM history WHERE node_id = $1"
        " AND item = 'FW_BMC_0' ORDER BY observed_at",
        node,
    )
    assert [(r["old_version"], r["new_version"]) for r in history] == [
        (None, good),
        (good, "GB200Nvl-24.09-1"),
        ("GB200Nvl-24.09-1", good),
    ]


async def test_unreachable_bmc_is_recorded_with_its_reason_and_keeps_last_versions(
    harness: Harness,
) -> None:
    golden = harness.golden()
    await harness.pin({"gb200": golden})
    await harness.sweep()
    node = harness.nodes[0]
    harness.nodes[0] = node.model_copy(update={"bmc_url": "http://127.71.9.9:9"})
    summary = await harness.sweep()
    assert summary.unreadable == 1
    row = await harness.app.require().pool.fetchrow(
        "SELECT readable, error, unreadable_since, components::text FROM observations"
        " WHERE node_id = $1 AND source = 'redfish'",
        node.id,
    )
    assert row is not None
    assert row["readable"] is False and row["error"] and row["unreadable_since"] is not None
    assert golden[Component.BMC] in row["components"]  # last known versions are kept
    # No version changed, so no drift event; the status query counts it unreadable.
    assert await harness.drift_events() == []


async def test_an_entry_without_the_plain_http_allowance_gets_no_credentials(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # The simulator serves plain http and its fleet list allows it; one entry does not.
    caplog.set_level(logging.WARNING)
    node = harness.nodes[0]
    harness.nodes[0] = node.model_copy(update={"allow_plain_http": False})
    summary = await harness.sweep()
    assert summary.unreadable == 1
    error = await harness.app.require().pool.fetchval(
        "SELECT error FROM observations WHERE node_id = $1 AND source = 'redfish'", node.id
    )
    assert error == (
        f"refusing to send credentials over plain http to {node.bmc_url}: use https, or "
        "allow plain http for this BMC explicitly (allow_plain_http)"
    )
    assert harness.sim.bmc(node.id).ledger == []  # not even a login attempt
    others = ", ".join(n.id for n in harness.nodes[1:])
    warnings = [r.getMessage() for r in caplog.records if "over plain http (" in r.getMessage()]
    assert warnings == [
        "sending BMC credentials over plain http (allowed by their registry entries) to "
        f"3 BMC(s): {others}"
    ]
