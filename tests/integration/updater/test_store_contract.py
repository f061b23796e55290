"""One set of behavioural assertions, run on both updater stores: PostgreSQL (the service's)
and the in-memory one the unit and simulator tests use. A fake that drifts from the real
store fails here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lockstep_common import db
from lockstep_common.envelope import source_of
from lockstep_common.events.v1 import AttestedComponent, WavePlanned
from lockstep_common.transitions import InvalidTransition
from lockstep_common.vocabulary import Component
from lockstep_updater.adapters.repository import PostgresStore
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.domain.windows import Declared
from lockstep_updater.store import Target, UpdaterStore
from lockstep_updater.testing.memory_store import MemoryStore
from tests.integration.updater.schema import migrated

pytestmark = pytest.mark.integration
LAPSED = -1.0  # a lease that has ended when granted: lapsed on either store's clock
STACK = "d" * 64


@pytest.fixture(params=["memory", "postgres"])
async def store(
    request: pytest.FixtureRequest, servers: Any, namespace: str
) -> AsyncIterator[UpdaterStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    schema = await migrated(servers.database_url, namespace)
    pool = await db.create_pool(
        servers.database_url, schema, min_size=1, max_size=2, application_name="contract"
    )
    try:
        yield PostgresStore(pool, source_of("updater"))
    finally:
        await pool.close()


def wave(number: int, *nodes: str, rollout: str = "r-1") -> WavePlanned:
    return WavePlanned(
        rollout_id=rollout,
        wave=number,
        node_ids=nodes,
        components=(Component.GPU_VBIOS, Component.BMC),
        max_unavailable=1,
        failure_budget=0,
        soak_seconds=0,
    )


async def test_a_wave_is_recorded_once_and_its_items_claimed_in_order(
    store: UpdaterStore,
) -> None:
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2"}))
        assert await tx.record_wave(wave(0, "n2", "n1"), "c-1")
        assert not await tx.record_wave(wave(0, "n2", "n1"), "c-1")  # redelivered
    async with store.transaction() as tx:
        first = await tx.claim(60)
        second = await tx.claim(60)
        assert await tx.claim(60) is None  # both held
    assert first is not None and second is not None
    assert [(c.node_id, c.state, c.token, c.attempts) for c in (first, second)] == [
        ("n2", NodeStep.PREFLIGHT, 1, 1),
        ("n1", NodeStep.PREFLIGHT, 1, 1),
    ]
    assert first.components == ("gpu_vbios", "bmc") and first.correlation_id == "c-1"


async def test_claims_take_the_longest_ready_item_first(store: UpdaterStore) -> None:
    # A node that keeps coming back (polling its drain) must not starve the nodes behind it.
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2"}))
        await tx.record_wave(wave(0, "n1", "n2"), None)
    if isinstance(store, MemoryStore):
        store.advance(1)  # PostgreSQL's now() moves on between transactions by itself
    async with store.transaction() as tx:
        first = await tx.claim(60)
        assert first is not None and first.node_id == "n1"
        await tx.advance(first, NodeStep.STAGING)  # ready again at once
    async with store.transaction() as tx:
        second = await tx.claim(60)
        third = await tx.claim(60)
    assert second is not None and third is not None
    assert [(c.node_id, c.state) for c in (second, third)] == [
        ("n2", NodeStep.PREFLIGHT),  # ready since the wave was recorded
        ("n1", NodeStep.STAGING),
    ]


async def test_a_lapsed_lease_is_taken_over_and_the_old_holder_fenced_out(
    store: UpdaterStore,
) -> None:
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1"}))
        await tx.record_wave(wave(0, "n1"), None)
        old = await tx.claim(LAPSED)
    assert old is not None
    async with store.transaction() as tx:
        new = await tx.claim(60)
    assert new is not None and (new.token, new.attempts) == (2, 2)
    async with store.transaction() as tx:
        assert not await tx.still_holds(old, 60)
        assert await tx.still_holds(new, 60)
        await tx.save_progress(new, {"pool": "p0", "components": {"gpu_vbios": {"sent": True}}})
        await tx.advance(new, NodeStep.STAGING, reason="planned")
    async with store.transaction() as tx:
        assert not await tx.still_holds(new, 60)  # released by the step's end
        assert await tx.step_now(old) is NodeStep.STAGING  # whoever holds it, or none
        again = await tx.claim(60)
    assert again is not None and again.state is NodeStep.STAGING
    assert again.token == 4  # claims 1 and 2, the release 3, this claim 4: always forward
    assert again.progress == {"pool": "p0", "components": {"gpu_vbios": {"sent": True}}}
    async with store.transaction() as tx:
        (record,) = await tx.history("n1", 10)
    assert (record.step, record.outcome, record.token, record.attempt, record.reason) == (
        "preflight",
        "staging",
        2,
        2,
        "planned",
    )


async def test_a_step_that_moves_on_keeps_the_item_for_its_next_step_only_when_ready(
    store: UpdaterStore,
) -> None:
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1"}))
        await tx.record_wave(wave(0, "n1"), None)
        first = await tx.claim(60)
    assert first is not None
    async with store.transaction() as tx:
        kept = await tx.advance(first, NodeStep.STAGING, progress={"pool": "p0"}, keep_lease_s=60)
    assert kept is not None
    assert (kept.state, kept.token, kept.attempts, kept.progress) == (
        NodeStep.STAGING,
        first.token + 1,
        first.attempts + 1,
        {"pool": "p0"},
    )
    async with store.transaction() as tx:
        assert not await tx.still_holds(first, 60)  # the old claim is fenced out
        assert await tx.claim(60) is None  # nobody else gets the kept item
        assert await tx.still_holds(kept, 60)
        # Not ready now (a retry, a budget wait) or not moved on: the item is let go.
        assert await tx.advance(kept, NodeStep.STAGING, retry_in_s=30, keep_lease_s=60) is None
    async with store.transaction() as tx:
        assert not await tx.still_holds(kept, 60)
        assert await tx.claim(60) is None  # its retry is 30 s away
    async with store.transaction() as tx:
        (preflight, staging) = await tx.history("n1", 10)
    assert (preflight.step, preflight.outcome, staging.step, staging.token) == (
        "preflight",
        "staging",
        "staging",
        kept.token,
    )
    assert staging.started_at >= preflight.ended_at  # the kept step starts when kept


async def test_an_item_is_never_kept_past_its_end(store: UpdaterStore) -> None:
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2"}))
        await tx.record_wave(wave(0, "n1", "n2"), None)
        one, two = await tx.claim(60), await tx.claim(60)
    assert one is not None and two is not None
    async with store.transaction() as tx:
        assert await tx.advance(one, NodeStep.DONE, keep_lease_s=60) is None
        assert await tx.advance(two, NodeStep.STAGING, parked=True, keep_lease_s=60) is None


async def test_only_an_item_nobody_holds_in_a_named_step_is_claimed_as_orphaned(
    store: UpdaterStore,
) -> None:
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2"}))
        await tx.record_wave(wave(0, "n1", "n2"), None)
        first = await tx.claim(60)
        second = await tx.claim(60)
    assert first is not None and second is not None
    async with store.transaction() as tx:
        for target in (NodeStep.STAGING, NodeStep.CORDONING, NodeStep.DRAINING):
            await tx.advance(first, target)  # released, nobody claims it again
        await tx.advance(second, NodeStep.STAGING, retry_in_s=60)  # waiting for its retry
    draining = frozenset({NodeStep.DRAINING})
    async with store.transaction() as tx:
        assert await tx.claim_orphan(3600, 60, draining) is None  # released only just now
        assert await tx.claim_orphan(0, 60, frozenset({NodeStep.STAGING})) is None  # waiting
        orphan = await tx.claim_orphan(0, 60, draining)
        assert await tx.claim_orphan(0, 60, draining) is None  # now held by the reaper
    assert orphan is not None
    assert (orphan.node_id, orphan.state, orphan.attempts) == ("n1", NodeStep.DRAINING, 1)
    async with store.transaction() as tx:
        assert await tx.still_holds(orphan, 60)
        assert not await tx.still_holds(first, 60)  # the dead worker is fenced out


async def test_a_move_the_table_forbids_is_refused_and_nothing_commits(
    store: UpdaterStore,
) -> None:
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1"}))
        await tx.record_wave(wave(0, "n1"), None)
        claim = await tx.claim(60)
    assert claim is not None
    with pytest.raises(InvalidTransition):
        async with store.transaction() as tx:
            await tx.advance(claim, NodeStep.ACTIVATING)
    async with store.transaction() as tx:
        assert await tx.still_holds(claim, 60)
        assert await tx.history("n1", 10) == []


async def test_facts_count_the_pool_halts_and_failures(store: UpdaterStore) -> None:
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2", "n3"}))
        await tx.record_wave(wave(0, "n1", "n2", "n3"), None)
        a, b, c = [await tx.claim(60) for _ in range(3)]
    assert a is not None and b is not None and c is not None
    async with store.transaction() as tx:
        await tx.facts(a, "p0")
        for step in (NodeStep.STAGING, NodeStep.CORDONING, NodeStep.DRAINING):
            await tx.advance(a, step)
        await tx.advance(b, NodeStep.FAILED, reason="bad image")
        facts = await tx.facts(c, "p0")
    assert (facts.others_out, facts.failures, facts.halted) == (1, 1, None)
    assert facts.in_wave is facts.in_plan is True
    assert (facts.max_unavailable, facts.failure_budget, facts.wave_released) == (1, 0, True)
    async with store.transaction() as tx:
        await tx.halt("r-1", "ops: abort")
        await tx.halt("r-1", "later reason")  # the first is kept
        assert (await tx.facts(c, "p1")).halted == "ops: abort"
        assert (await tx.facts(c, "p1")).others_out == 0  # another pool


async def test_a_wave_completes_once_when_every_item_ended(store: UpdaterStore) -> None:
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2"}))
        await tx.record_wave(wave(0, "n1", "n2"), "c-9")
        a, b = await tx.claim(60), await tx.claim(60)
    assert a is not None and b is not None
    async with store.transaction() as tx:
        await tx.advance(a, NodeStep.DONE)
        assert await tx.complete_wave("r-1", 0) is None  # n2 still open
        await tx.advance(b, NodeStep.CANCELLED)
        result = await tx.complete_wave("r-1", 0)
        assert await tx.complete_wave("r-1", 0) is None  # once
    assert result is not None
    assert (result.succeeded, result.failed, result.correlation_id) == (("n1",), ("n2",), "c-9")


async def test_the_target_joins_the_plan_and_the_attested_bundle(store: UpdaterStore) -> None:
    image = AttestedComponent(
        profile="gb200",
        component=Component.GPU_VBIOS,
        version="97.00.9A.00.01",
        image="images/gpu.fwpkg",
        sha384="e" * 96,
        size=10,
        banks="ab",
        activation="reset",
    )
    async with store.transaction() as tx:
        assert await tx.target("r-1") is None
        await tx.record_plan("r-1", STACK, frozenset({"n1"}))
        assert await tx.target("r-1") is None  # no bundle.attested yet
        await tx.record_bundle(STACK, "/bundles/b", (image,))
        target = await tx.target("r-1")
    assert target is not None
    assert (target.stack_hash, target.bundle_uri, target.components) == (
        STACK,
        "/bundles/b",
        (image,),
    )


async def test_an_attested_package_is_found_by_profile_component_and_version_latest_first(
    store: UpdaterStore,
) -> None:
    def driver(version: str, profile: str = "gb200", sha: str = "d") -> AttestedComponent:
        return AttestedComponent(
            profile=profile,
            component=Component.DRIVER,
            version=version,
            image=f"images/driver-{version}.deb",
            sha384=sha * 96,
            size=10,
            banks="one_way",
            activation="in_band",
        )

    old, new, hgx = driver("580.65.06"), driver("580.95.05"), driver("580.95.05", "hgx-h100")
    async with store.transaction() as tx:
        assert await tx.attested("gb200", "driver", "580.95.05") is None  # nothing attested
        await tx.record_bundle("a" * 64, "/bundles/a", (old, hgx))
        await tx.record_bundle("b" * 64, "/bundles/b", (new,))
        found = await tx.attested("gb200", "driver", "580.95.05")
        assert found is not None and found[1] == new and found[0].bundle_uri == "/bundles/b"
        # another profile's entry of the same version is not this profile's package
        found = await tx.attested("hgx-h100", "driver", "580.95.05")
        assert found is not None and found[0].stack_hash == "a" * 64 and found[1] == hgx
        assert await tx.attested("gb200", "cuda", "580.95.05") is None
        assert await tx.attested("gb200", "driver", "595.58.03") is None
    again = driver("580.95.05", sha="e")
    async with store.transaction() as tx:  # a later bundle naming it again wins
        await tx.record_bundle("c" * 64, "/bundles/c", (again,))
    async with store.transaction() as tx:
        found = await tx.attested("gb200", "driver", "580.95.05")
    assert found is not None and found == (Target("c" * 64, "/bundles/c", (again,)), again)


async def test_rollbacks_are_one_item_per_node_beside_its_update(store: UpdaterStore) -> None:
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2"}))
        await tx.record_wave(wave(0, "n1", "n2"), "c-1")
        assert await tx.update_item("r-1", "n1") == (NodeStep.PENDING, {})
        assert await tx.request_rollbacks("r-1", 0) == 2
        assert await tx.request_rollbacks("r-1", 0) == 0  # a redelivered verdict adds nothing
        assert await tx.update_item("r-1", "n3") is None
    claims = []
    async with store.transaction() as tx:
        while (claim := await tx.claim(60)) is not None:
            claims.append(claim)
    assert [(c.node_id, c.kind) for c in claims] == [
        ("n1", "update"),
        ("n2", "update"),
        ("n1", "rollback"),
        ("n2", "rollback"),
    ]
    async with store.transaction() as tx:
        for claim in claims:
            if claim.kind == "update":
                await tx.advance(claim, NodeStep.CANCELLED)
        # The wave is complete with its updates: its flip-backs are not part of its result.
        result = await tx.complete_wave("r-1", 0)
    assert result is not None and result.failed == ("n1", "n2")


async def test_a_wave_keeps_what_its_approved_plan_lets_a_flip_back_re_flash(
    store: UpdaterStore,
) -> None:
    """``wave.planned`` ``reflash``: kept with the wave as first recorded; a wave without it
    (or an event from before the field) lets nothing be re-flashed."""
    says = wave(0, "n1").model_copy(update={"reflash": (Component.GPU_VBIOS,)})
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2"}))
        assert await tx.record_wave(says, None)
        assert not await tx.record_wave(wave(0, "n1"), None)  # a redelivery changes nothing
        await tx.record_wave(wave(1, "n2"), None)
        assert await tx.reflash("r-1", 0) == frozenset({"gpu_vbios"})
        assert await tx.reflash("r-1", 1) == frozenset()
        assert await tx.reflash("r-2", 0) == frozenset()  # no such wave


async def test_remedies_are_one_per_node_held_until_approved_and_fenced_from_rollouts(
    store: UpdaterStore,
) -> None:

    async with store.transaction() as tx:
        assert await tx.record_remedy(
            "n1", "remedy-a", held=True, progress={"pin": "580.95.05"}, correlation_id="c"
        )
        # A repeated drift event while one is open adds nothing.
        assert not await tx.record_remedy(
            "n1", "remedy-b", held=False, progress={}, correlation_id=None
        )
        assert await tx.claim(60) is None  # held for approval
        assert await tx.approve_remedy("n1")
        assert not await tx.approve_remedy("n1")
    async with store.transaction() as tx:
        remedy = await tx.claim(60)
    assert remedy is not None
    assert (remedy.kind, remedy.rollout_id, remedy.wave) == ("remedy", "remedy-a", 0)
    assert remedy.progress == {"pin": "580.95.05"} and remedy.state is NodeStep.PREFLIGHT
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2"}))
        await tx.record_wave(wave(0, "n2", "n1"), None)
        other = await tx.claim(60)
        assert other is not None and other.node_id == "n2"
        await tx.facts(other, "p0")
        for step in (NodeStep.STAGING, NodeStep.CORDONING, NodeStep.DRAINING):
            await tx.advance(other, step)
        facts = await tx.remedy_facts(remedy, "p0")
    # n1 is in a released wave of r-1; n2 of the pool is out of service for it.
    assert (facts.in_rollout, facts.others_out, facts.remedies_out) == ("r-1", 1, 0)
    async with store.transaction() as tx:
        for step in (NodeStep.CORDONING, NodeStep.DRAINING):
            await tx.advance(remedy, step)
        # Released items (n2's, the remedy's) are claimable again beside n1's update.
        claims = [await tx.claim(60) for _ in range(3)]
        mine = next(c for c in claims if c is not None and (c.node_id, c.kind) == ("n1", "update"))
        busy = await tx.facts(mine, "p0")
    assert busy.busy_with == "GSP remedy remedy-a" and busy.others_out == 2
    async with store.transaction() as tx:
        await tx.advance(remedy, NodeStep.IN_BAND)
        await tx.advance(remedy, NodeStep.QUARANTINED, reason="both branches failed")
        # Gave up: a human decides; the drift seen again starts nothing.
        assert not await tx.record_remedy(
            "n1", "remedy-c", held=False, progress={}, correlation_id=None
        )
        assert await tx.record_remedy(
            "n3", "remedy-d", held=False, progress={}, correlation_id=None
        )
        done = await tx.claim(60)
        assert done is not None and done.node_id == "n3"
        await tx.advance(done, NodeStep.DONE, reason="aligned already")
        # Repaired once and broken again later: a new runbook.
        assert await tx.record_remedy(
            "n3", "remedy-e", held=False, progress={}, correlation_id=None
        )


async def test_a_held_remedy_is_withdrawn_when_its_drift_resolves(store: UpdaterStore) -> None:
    async with store.transaction() as tx:
        await tx.record_remedy("n1", "remedy-a", held=True, progress={}, correlation_id=None)
        await tx.record_remedy("n2", "remedy-b", held=False, progress={}, correlation_id=None)
        assert await tx.withdraw_remedy("n1", "drift resolved before approval")
        assert not await tx.withdraw_remedy("n1", "again")
        assert not await tx.withdraw_remedy("n2", "claimable: not held")
        running = await tx.claim(60)
    assert running is not None and running.node_id == "n2"  # n1's is no longer claimable
    async with store.transaction() as tx:
        assert await tx.claim(60) is None
        # Withdrawn is an end like done: a later drift starts a new runbook.
        assert await tx.record_remedy("n1", "remedy-c", held=True, progress={}, correlation_id=None)


async def test_a_node_parked_for_budget_is_woken_when_its_pool_frees_a_place(
    store: UpdaterStore,
) -> None:
    # A node waiting for a place in its pool's out-of-service budget does not poll: the step
    # that gives a node of its pool back makes it claimable in the same transaction.
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2", "n3", "n4"}))
        await tx.record_wave(wave(0, "n1", "n2", "n3", "n4"), None)
        out, parked, paused, elsewhere = [await tx.claim(60) for _ in range(4)]
    assert out and parked and paused and elsewhere
    async with store.transaction() as tx:
        for claim, pool in ((out, "p0"), (parked, "p0"), (paused, "p0"), (elsewhere, "p1")):
            await tx.facts(claim, pool)
            for step in (NodeStep.STAGING, NodeStep.CORDONING):
                await tx.advance(claim, step)
        await tx.advance(out, NodeStep.DRAINING)
        await tx.advance(parked, NodeStep.CORDONING, retry_in_s=3600, parked=True)
        await tx.advance(paused, NodeStep.CORDONING, retry_in_s=3600)  # a plain retry pause
        await tx.advance(elsewhere, NodeStep.CORDONING, retry_in_s=3600, parked=True)
        # Still out of service (paused, as a step that polls its task): nothing freed.
        await tx.advance(out, NodeStep.ACTIVATING, retry_in_s=3600)
    async with store.transaction() as tx:
        assert await tx.claim(60) is None
        await tx.advance(out, NodeStep.UNCORDONING, retry_in_s=3600)
        assert await tx.claim(60) is None  # giving the node back still holds its place
        await tx.advance(out, NodeStep.DONE)
    async with store.transaction() as tx:
        woken = await tx.claim(60)
        assert await tx.claim(60) is None  # not the paused one, not another pool's
    assert woken is not None and (woken.node_id, woken.state) == ("n2", NodeStep.CORDONING)


async def test_a_freed_place_wakes_as_many_parked_nodes_as_there_are_places_longest_first(
    store: UpdaterStore,
) -> None:
    # Not every parked node of the pool: each woken node is claimed, read from the inventory
    # and checked against the budget, and at fleet size 1,400 of them took one place at every
    # place that freed. A pool of max_unavailable 2: one node out, five parked (the last two
    # as if a wake had been missed, so that both free places are made up for at once).
    nodes = [f"n{i}" for i in range(6)]
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset(nodes))
        await tx.record_wave(wave(0, *nodes).model_copy(update={"max_unavailable": 2}), None)
        claims = [c for _ in nodes if (c := await tx.claim(60)) is not None]
    assert len(claims) == len(nodes)
    out, *parked = claims
    async with store.transaction() as tx:
        for claim in claims:
            await tx.facts(claim, "p0")
            for step in (NodeStep.STAGING, NodeStep.CORDONING):
                await tx.advance(claim, step)
        await tx.advance(out, NodeStep.DRAINING, retry_in_s=3600)
        # Parked last to first: n5's re-check is due first, n4's next (claim order).
        for due, claim in enumerate(reversed(parked)):
            await tx.advance(claim, NodeStep.CORDONING, retry_in_s=3600 + due, parked=True)
    async with store.transaction() as tx:
        assert await tx.claim(60) is None
        await tx.advance(out, NodeStep.UNCORDONING, retry_in_s=3600)  # still holds its place
        assert await tx.claim(60) is None
        await tx.advance(out, NodeStep.DONE)
    async with store.transaction() as tx:
        woken = [await tx.claim(60) for _ in range(3)]
    assert woken[2] is None  # two places, two woken: n1-n3 wait on
    assert sorted(c.node_id for c in woken[:2] if c) == ["n4", "n5"]


async def test_facts_say_whether_the_node_is_in_the_wave_and_the_approved_plan(
    store: UpdaterStore,
) -> None:
    # A corrupted wave.planned names n3, outside the plan, and n2, which the plan put in wave
    # 1: membership is answered per node (a plan may name 12,500), and the guard refuses both.
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2"}), {"n1": 0, "n2": 1})
        await tx.record_wave(wave(0, "n1", "n2", "n3"), None)
        await tx.record_wave(wave(0, "n4", rollout="r-2"), None)  # no plan seen for r-2
        claims = [await tx.claim(60) for _ in range(4)]
    found = {}
    async with store.transaction() as tx:
        for claim in claims:
            assert claim is not None
            facts = await tx.facts(claim, "p0")
            found[claim.node_id] = (facts.in_wave, facts.in_plan, facts.approved_wave)
    assert found == {
        "n1": (True, True, 0),
        "n2": (True, True, 1),
        "n3": (True, False, None),
        "n4": (True, None, None),
    }


async def test_maintenance_windows_keep_the_latest_announcement(store: UpdaterStore) -> None:
    """What `maintenance.changed` leaves (migration 0009): the pool's and the site's windows,
    a later announcement replaces an earlier one, an older one arriving late changes nothing,
    and a cleared schedule holds nothing back."""
    t0 = datetime(2026, 3, 2, 12, tzinfo=UTC)
    t1 = t0 + timedelta(minutes=5)
    async with store.transaction() as tx:
        assert await tx.record_maintenance("pool", "p0", "UTC", ("sat 22:00-06:00",), t1)
        assert not await tx.record_maintenance("pool", "p0", "UTC", ("sun 01:00-02:00",), t0)
        assert await tx.record_maintenance(
            "site", "s1", "Europe/Berlin", ("daily 01:00-02:00",), t0
        )
        assert await tx.record_maintenance("pool", "p1", "UTC", ("daily 01:00-02:00",), t0)
    async with store.transaction() as tx:
        found = sorted(await tx.maintenance("p0", "s1"), key=lambda d: d.scope)
        assert found == [
            Declared("pool", "p0", "UTC", ("sat 22:00-06:00",)),
            Declared("site", "s1", "Europe/Berlin", ("daily 01:00-02:00",)),
        ]
        assert await tx.record_maintenance("pool", "p0", "UTC", None, t1 + timedelta(seconds=1))
    async with store.transaction() as tx:
        assert await tx.maintenance("p0", "elsewhere") == []


async def test_the_sweep_wakes_parked_nodes_pool_by_pool_and_every_one_of_a_halted_rollout(
    store: UpdaterStore,
) -> None:
    # The net behind the wake on a freed place is one statement per pool, not a re-check of
    # every parked node: a pool with no free place still wakes one (it re-checks the rest of
    # what may have changed), the node parked longest.
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2", "n3", "n4"}))
        await tx.record_wave(wave(0, "n1", "n2", "n3", "n4"), None)
        out, first, second, elsewhere = [await tx.claim(60) for _ in range(4)]
    assert out and first and second and elsewhere
    async with store.transaction() as tx:
        for claim, pool in ((out, "p0"), (first, "p0"), (second, "p0"), (elsewhere, "p1")):
            await tx.facts(claim, pool)
            for step in (NodeStep.STAGING, NodeStep.CORDONING):
                await tx.advance(claim, step)
        await tx.advance(out, NodeStep.DRAINING, retry_in_s=3600)
        await tx.advance(first, NodeStep.CORDONING, retry_in_s=3600, parked=True)
        await tx.advance(second, NodeStep.CORDONING, retry_in_s=3601, parked=True)
        await tx.advance(elsewhere, NodeStep.CORDONING, retry_in_s=3600, parked=True)
    async with store.transaction() as tx:
        assert await tx.wake_halted() == 0
        assert await tx.parked_pools() == ["p0", "p1"]
        assert await tx.wake_parked("p0") == 1
        assert await tx.wake_parked("p1") == 1
        assert await tx.wake_parked("nowhere") == 0
    async with store.transaction() as tx:
        woken = [await tx.claim(60) for _ in range(3)]
    assert woken[2] is None  # n3 waits on
    assert sorted(c.node_id for c in woken[:2] if c) == ["n2", "n4"]
    async with store.transaction() as tx:
        assert await tx.parked_pools() == ["p0"]
        await tx.halt("r-1", "operator")
        assert await tx.wake_halted() == 1  # a halted rollout's node ends, it does not wait
        assert await tx.parked_pools() == []
        halted = await tx.claim(60)
    assert halted is not None and halted.node_id == "n3"


async def test_a_node_is_held_out_by_an_item_under_way_or_a_latest_quarantine_only(
    store: UpdaterStore,
) -> None:
    # What the reaper's sweep of stray drains asks (``Executor.give_back_strays``).
    async with store.transaction() as tx:
        await tx.record_plan("r-1", STACK, frozenset({"n1", "n2", "n3"}))
        await tx.record_wave(wave(0, "n1", "n2", "n3"), None)
        one, two, three = await tx.claim(60), await tx.claim(60), await tx.claim(60)
    assert one is not None and two is not None and three is not None
    async with store.transaction() as tx:
        await tx.advance(one, NodeStep.CANCELLED)
        for target in (NodeStep.STAGING, NodeStep.CORDONING, NodeStep.DRAINING):
            await tx.advance(two, target)
        path = (NodeStep.STAGING, NodeStep.CORDONING, NodeStep.DRAINING, NodeStep.ACTIVATING)
        for target in (*path, NodeStep.AWAITING_BMC, NodeStep.QUARANTINED):
            await tx.advance(three, target)
    async with store.transaction() as tx:
        assert not await tx.holds_node_out("n1")  # its item ended: a drain would be a stray
        assert await tx.holds_node_out("n2")  # draining: its own item holds it
        assert await tx.holds_node_out("n3")  # quarantined: kept out by design
        assert not await tx.holds_node_out("n-unknown")


async def test_a_held_remedy_for_another_pin_is_withdrawn_one_for_the_same_is_kept(
    store: UpdaterStore,
) -> None:
    async with store.transaction() as tx:
        old = {"kind": "remedy", "pin": "580.65.06"}
        await tx.record_remedy("n1", "remedy-a", held=True, progress=old, correlation_id=None)
        assert not await tx.withdraw_remedy("n1", "same pin", unless_pin="580.65.06")
        assert await tx.withdraw_remedy("n1", "now pins 595", unless_pin="595.58.03")
        assert await tx.record_remedy(
            "n1", "remedy-b", held=True, progress={"pin": "595.58.03"}, correlation_id=None
        )
        assert not await tx.withdraw_remedy("n1", "same pin", unless_pin="595.58.03")
