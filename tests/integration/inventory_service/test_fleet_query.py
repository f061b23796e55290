"""``fleet.query``: the planner's and updater's view of the fleet, a page at a time."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

from nats.errors import NoRespondersError

from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_common.db import Conn
from lockstep_common.envelope import make_envelope
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import FleetQueryAnswered, FleetQueryRequested, ScopeSelector
from lockstep_common.vocabulary import Component
from lockstep_inventory.adapters import registry
from lockstep_inventory.responder import Responder
from tests.integration.inventory_service.conftest import Harness


async def ask(h: Harness, request: FleetQueryRequested) -> FleetQueryAnswered:
    env = make_envelope(request, source="/test")
    reply = await h.nc.request(h.ns.wire(subjects.fleet_query()), env.to_json(), timeout=5)
    answered = REGISTRY.decode(reply.data, max_bytes=1 << 20).data
    assert isinstance(answered, FleetQueryAnswered)
    return answered


async def test_pages_cover_every_node_once_in_id_order_with_what_was_observed(
    harness: Harness,
) -> None:
    await harness.sweep()
    pages, after = [], None
    while True:
        page = await ask(harness, FleetQueryRequested(after=after, limit=3))
        pages.append(page)
        if page.next_after is None:
            break
        after = page.next_after
    ids = [n.node_id for p in pages for n in p.nodes]
    assert ids == sorted(n.id for n in harness.nodes)
    assert [len(p.nodes) for p in pages] == [3, 1]
    node = pages[0].nodes[0]
    registered = next(n for n in harness.nodes if n.id == node.node_id)
    assert (node.site, node.profile, node.bmc_url) == (
        registered.site,
        registered.profile,
        registered.bmc_url,
    )
    assert node.credentials == "env:LOCKSTEP_TESTBMC"  # a reference, never the secret
    assert "lockstep-sim" not in node.model_dump_json()
    assert node.readable is True and node.observed, "the sweep's versions are in the answer"
    # A GB200 tray's NIC members are two families at two versions: a conflict, still answered.
    nic = node.conflicts[Component.NIC]
    assert len(set(nic.values())) == 2 and Component.NIC not in node.observed


async def test_a_scope_selects_and_a_bad_request_gets_one_reason(harness: Harness) -> None:
    first, second = sorted(n.id for n in harness.nodes)[:2]
    page = await ask(harness, FleetQueryRequested(scope=ScopeSelector(nodes=(second, first))))
    assert [n.node_id for n in page.nodes] == [first, second] and page.next_after is None
    none = await ask(harness, FleetQueryRequested(scope=ScopeSelector(pools=("no-such-pool",))))
    assert none.nodes == () and none.next_after is None

    reply = await harness.nc.request(
        harness.ns.wire(subjects.fleet_query()), b'{"type": "x"}', timeout=5
    )
    assert "error" in json.loads(reply.data)
    assert reply.headers is not None and "Lockstep-Error" in reply.headers


async def test_requests_are_answered_side_by_side_up_to_the_bound(harness: Harness) -> None:
    """A slow answer does not hold the requests behind it (answered one at a time, a wave's
    worth of ``fleet.query`` queued past the asker's timeout), and no more than
    ``concurrency`` are answered at once (each holds a database connection)."""
    subject = harness.ns.wire("test.side-by-side")
    bound, asked = 4, 6
    in_flight, peak = 0, 0
    all_in = asyncio.Event()

    async def answer(
        conn: Conn, request: FleetQueryRequested, now: dt.datetime
    ) -> FleetQueryAnswered:
        nonlocal in_flight, peak
        del conn, now
        if request.limit == 1:  # the probe below: answered at once
            return FleetQueryAnswered(nodes=(), next_after=None)
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == bound:
            all_in.set()
        await all_in.wait()  # one at a time, the first answer would wait for ever
        in_flight -= 1
        return FleetQueryAnswered(nodes=(), next_after=None)

    responder = Responder(
        subject, FleetQueryRequested, answer, source="/test", queue="q", concurrency=bound
    )
    stopping = asyncio.Event()
    running = asyncio.create_task(responder.run(harness.app.require(), stopping))

    async def request(limit: int) -> FleetQueryAnswered:
        env = make_envelope(FleetQueryRequested(limit=limit), source="/test")
        reply = await harness.nc.request(subject, env.to_json(), timeout=5)
        answered = REGISTRY.decode(reply.data, max_bytes=1 << 20).data
        assert isinstance(answered, FleetQueryAnswered)
        return answered

    async def subscribed() -> bool:
        try:
            await request(1)
        except NoRespondersError:
            return False
        return True

    try:
        await until(subscribed, what="the responder subscribed")
        answers = await asyncio.gather(*(request(2) for _ in range(asked)))
        assert len(answers) == asked
        assert peak == bound
    finally:
        stopping.set()
        await running


async def test_each_node_carries_a_registry_version_that_grows_with_every_change(
    harness: Harness,
) -> None:
    """Issue 28 item 3: the updater keeps a copy of a wave's nodes and re-reads one whose
    registry entry is newer: the version moves with a change (a new BMC URL, another pool),
    stays with an identical re-import, and only grows across a removal and a re-import."""
    first, second = sorted(harness.nodes, key=lambda n: n.id)[:2]

    async def versions() -> dict[str, int]:
        scope = ScopeSelector(nodes=(first.id, second.id))
        page = await ask(harness, FleetQueryRequested(scope=scope))
        return {n.node_id: n.version for n in page.nodes}

    before = await versions()
    assert all(v > 0 for v in before.values())
    pool = harness.app.require().pool
    async with pool.acquire() as conn:
        await registry.import_nodes(conn, [first, second])  # nothing changed
        assert await versions() == before
        moved = first.model_copy(update={"bmc_url": "https://moved.example:8443", "pool": "p9"})
        await registry.import_nodes(conn, [moved, second])
        after = await versions()
        assert after[first.id] > before[first.id] and after[second.id] == before[second.id]
        assert await registry.remove_nodes(conn, [first.id]) == []
        await registry.import_nodes(conn, [first])  # back as it was before the move
        assert (await versions())[first.id] > after[first.id]
