"""The console on the real services (issue 32): the whole rollout stack (``rollout_stack``),
a bad image that trips the canary's gate, and the console reading it as ``reader`` over the bus,
in a headless browser. The rollout page follows the rollout to its halt without a reload (woken
by the bus's ``rollout.halted``), and the gate page shows the healthgate's recorded decision:
the offending nodes of ``gate.tripped`` and, since a hard rule tripped it, the canary's and the
control's distributions as the judge compared them at the trip."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from selenium.webdriver.common.by import By

from lockstep_common.identities import READER
from lockstep_common.operator_settings import OperatorSettings
from lockstep_console.nudges import Nudges, subscribe
from lockstep_console.server import create_app
from lockstep_console.source import BusSource
from lockstep_sim.faults import Fault, FaultPlan
from tests.integration.console.browser import browser, chromium
from tests.integration.rollout_stack import Stack, running_stack
from tests.speed import scaled

pytestmark = pytest.mark.integration
# Read in the page at once: the live section is replaced as it changes (an element found
# before may be gone).
STATE = "return document.querySelector('[data-state]').textContent"


@pytest.fixture
async def stack(
    servers: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Stack]:
    chromium()  # skip before starting the stack when there is no browser
    async with running_stack(servers, namespace, tmp_path, monkeypatch) as running:
        yield running


async def test_the_tripped_canary_on_the_real_services(
    stack: Stack, servers: Any, tmp_path: Path
) -> None:
    # As `reader`: every read goes to ops.reader.<service>.<command>, which the services let
    # run read commands only (the test server checks no password: any will do).
    password = tmp_path / "reader-password"
    password.write_text("unused\n")
    password.chmod(0o600)
    settings = OperatorSettings(
        nats_url=servers.nats_url,
        namespace=stack.ns.name,
        nats_user=READER,
        nats_password_file=password,
    )
    source = BusSource(settings)
    nudges = Nudges()
    await subscribe(stack.nc, stack.ns.name, nudges)
    server = TestServer(create_app(source, nudges=nudges, poll_s=60.0))
    await server.start_server()
    url = str(server.make_url(""))
    stack.rt.simulator.set_faults(FaultPlan(faults=(Fault("degrade_health", components=("gpu",)),)))
    try:
        with browser() as chrome:
            await stack.start_rollout()
            (canary,) = await stack.wait("planner", "wave.planned.")
            rid = canary["rollout_id"]

            def open_rollout() -> str:
                chrome.get(f"{url}/rollouts/{rid}")
                chrome.execute_script("window.sameDocument = true")
                return str(chrome.execute_script(STATE))

            assert await asyncio.to_thread(open_rollout) in ("running", "planned")
            (tripped,) = await stack.wait("healthgate", "gate.tripped.")

            def halted() -> bool:
                return bool(chrome.execute_script(STATE) == "halted")

            deadline = asyncio.get_running_loop().time() + scaled(30)
            while not await asyncio.to_thread(halted):  # the page changes, no reload
                assert asyncio.get_running_loop().time() < deadline, "the page never halted"
                await asyncio.sleep(0.1)
            assert await asyncio.to_thread(chrome.execute_script, "return window.sameDocument")

            shown = await source.gate(rid)  # what `lockstep gate show --json` prints
            (record,) = shown.verdicts
            decision = record.decision
            assert decision["offending_nodes"] == tripped["offending_nodes"]

            def gate_page() -> tuple[list[str], list[str], str, list[str], list[str], str]:
                chrome.get(f"{url}/rollouts/{rid}/gate")
                nodes = chrome.find_elements(By.CSS_SELECTOR, "ul.nodes li")
                plots = chrome.find_elements(By.CSS_SELECTOR, "#at-trip-0 svg[role=img]")
                drawn = chrome.find_elements(By.CSS_SELECTOR, "#hits-0 svg text")
                listed = chrome.find_elements(By.CSS_SELECTOR, "table.hits tbody tr")
                return (
                    [n.text for n in nodes],
                    [str(p.get_attribute("aria-label")) for p in plots],
                    str(chrome.find_element(By.ID, "wave-0-h").text),
                    [str(t.get_attribute("textContent")) for t in drawn],
                    [r.text for r in listed],
                    str(chrome.find_element(By.ID, "at-trip-0").text),
                )

            nodes, plots, heading, drawn, listed, at_trip = await asyncio.to_thread(gate_page)
            assert "tripped" in heading
            assert nodes == list(tripped["offending_nodes"])
            hits_shown(decision, tripped["offending_nodes"], drawn, listed)
            distributions_at_trip_shown(decision, at_trip, plots)

            await strata_and_quarantine_as_the_reader(source, chrome, url, rid, canary)
    finally:
        await server.close()


def distributions_at_trip_shown(decision: dict[str, Any], section: str, plots: list[str]) -> None:
    """The hard rule decided before the soak ended, so the judge compared nothing for the
    verdict; the page draws the judge's comparison as of the trip (``at_trip``, as `gate show
    --json` gives it) instead: canary and control distributions per metric, captioned so."""
    assert decision["metrics"] == []
    assert "The metrics as of the trip: evidence only, the hard rule decided" in section
    assert "over the window so far, as of the trip" in section
    compared = [m for m in decision["at_trip"]["metrics"] if m.get("comparison")]
    assert any(m["metric"] == "nccl_busbw_gbps" for m in compared), decision["at_trip"]
    for m in compared:
        c = m["comparison"]
        assert len(c["canary_deciles"]) == len(c["control_deciles"]) == 11, json.dumps(c)
        assert any(
            p.startswith(f"{m['metric']} in {m['stratum']}: canary median")
            and f"control median {c['control_median']:.4g}" in p
            for p in plots
        ), (m["metric"], plots)


def hits_shown(
    decision: dict[str, Any], offending: list[str], drawn: list[str], listed: list[str]
) -> None:
    """A hard rule tripped the canary: its hits on the timeline name the offending nodes, and
    the table lists each with the reading and threshold `gate show --json` gives."""
    hits = [(r["rule"], h) for r in decision["rules"] for h in r["hits"]]
    assert {h["node"] for _, h in hits} == set(offending), hits
    assert set(offending) <= set(drawn), drawn
    for rule, h in hits:
        value = "no sample" if h["value"] is None else f"{h['value']:.4g}"
        assert any(
            f"{h['node']} {rule}" in row and f"{value} {h['threshold']:.4g}" in row
            for row in listed
        ), (h, listed)


async def strata_and_quarantine_as_the_reader(
    source: BusSource, chrome: Any, url: str, rid: str, canary: dict[str, Any]
) -> None:
    """The plan's strata and the quarantined nodes, read as the reader (issue 32)."""
    status = (await source.rollout(rid)).rollout
    assert status is not None and status.strata
    assert {n for s in status.strata for n in s.canary} <= set(canary["node_ids"])
    held = await source.quarantined(None)  # answered to the reader, not refused

    def fleet_page() -> str:
        chrome.get(f"{url}/fleet")
        return str(chrome.find_element(By.CSS_SELECTOR, "[aria-labelledby=held-h]").text)

    section = await asyncio.to_thread(fleet_page)
    assert "not shown" not in section
    assert all(q.node_id in section for q in held.nodes)
