"""The storage contract, run against the in-memory fake and PostgreSQL alike: the fake that
the handler unit tests rely on behaves as the real store does."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from lockstep_common.events.v1 import DriftItem, ScopeSelector
from lockstep_common.vocabulary import Component, DriftKind, ObservationSource, Severity
from lockstep_inventory import admin
from lockstep_inventory.adapters import registry
from lockstep_inventory.adapters.pg_store import PgInventoryStore
from lockstep_inventory.domain.evaluate import RolloutFacts
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.ingestion import DriftRow, Head, HistoryRow
from lockstep_inventory.domain.observation import Observation, content_digest, unreadable
from lockstep_inventory.domain.pins import Pin, scope_key
from lockstep_inventory.settings import Settings
from lockstep_inventory.store import InventoryStore
from lockstep_inventory.testing import MemoryInventoryStore

pytestmark = pytest.mark.integration
C = Component
REDFISH, AGENT = ObservationSource.REDFISH, ObservationSource.AGENT
T0 = dt.datetime(2026, 5, 1, 12, tzinfo=dt.UTC)


def _node(node_id: str, site: str = "ams1") -> NodeEntry:
    return NodeEntry(
        id=node_id, bmc_url="http://127.0.0.1:8000", profile="gb200", site=site, credentials="env:B"
    )


N1, N2, N3 = _node("n1"), _node("n2"), _node("n3", site="fra1")


def _at(seconds: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@dataclass
class Backend:
    """One store, with what the contract needs beyond the Protocol: registering nodes (the
    fleet import) and reading history back."""

    store: InventoryStore
    register: Callable[[list[NodeEntry]], Awaitable[None]]
    history: Callable[[], Awaitable[list[HistoryRow]]]


@pytest.fixture(params=["memory", "postgres"])
def database(request: pytest.FixtureRequest) -> Settings | None:
    """Where the store keeps its state: None for memory, else a fresh schema (no server is
    started for the memory runs)."""
    if request.param == "memory":
        return None
    servers: Any = request.getfixturevalue("servers")
    namespace: str = request.getfixturevalue("namespace")
    return Settings(database_url=servers.database_url, db_schema=f"{namespace}_inventory")


@pytest.fixture
async def backend(database: Settings | None) -> AsyncIterator[Backend]:
    if database is None:
        memory = MemoryInventoryStore()

        async def register_in_memory(nodes: list[NodeEntry]) -> None:
            memory.register(nodes)

        async def memory_history() -> list[HistoryRow]:
            return list(memory.history)

        yield Backend(memory, register_in_memory, memory_history)
        return
    async with admin.migrated_connection(database) as conn:

        async def register(nodes: list[NodeEntry]) -> None:
            await registry.import_nodes(conn, nodes)

        async def history() -> list[HistoryRow]:
            rows = await conn.fetch(
                "SELECT node_id, source, item, old_version, new_version, observed_at FROM history"
            )
            return [tuple(r) for r in rows]

        yield Backend(PgInventoryStore(conn), register, history)


REPORT = Observation(
    REDFISH,
    7,
    _at(0),
    components={C.BMC: "b1"},
    conflicts={C.CPLD: {"CPLD_0": "0.2.1.1", "CPLD_1": "0.2.1.8"}},
    members={"BMC_Fw": "b1", "CPLD_0": "0.2.1.1", "CPLD_1": "0.2.1.8", "Odd_0": "x"},
)
AGENT_REPORT = Observation(
    AGENT,
    3,
    _at(1),
    components={C.DRIVER: "580.65.06"},
    firmware_dirs=("580.65.06",),
    loaded_module="580.65.06",
)


def _head(o: Observation) -> Head:
    return Head(o.source, o.sequence, o.observed_at, o.readable, content_digest(o))


async def test_reports_are_stored_whole_with_their_heads(backend: Backend) -> None:
    store = backend.store
    broken = unreadable(REDFISH, 2, _at(2), "connection refused")
    await store.save_observations([("n1", REPORT), ("n1", AGENT_REPORT), ("n2", broken)])
    assert await store.observations(["n1", "n2", "n9"]) == {
        "n1": {REDFISH: REPORT, AGENT: AGENT_REPORT},
        "n2": {REDFISH: broken},
    }
    assert await store.heads(["n1"]) == {
        ("n1", REDFISH): _head(REPORT),
        ("n1", AGENT): _head(AGENT_REPORT),
    }
    newer = Observation(REDFISH, 8, _at(3), components={C.BMC: "b2"}, members={"BMC_Fw": "b2"})
    await store.save_observations([("n1", newer)])
    assert (await store.observations(["n1"]))["n1"][REDFISH] == newer


async def test_a_touch_moves_times_and_readability_and_keeps_the_versions(
    backend: Backend,
) -> None:
    store = backend.store
    await store.save_observations([("n1", REPORT)])
    failed = unreadable(REDFISH, 9, _at(60), "timeout")
    await store.touch_observations([("n1", failed), ("n2", failed)])  # n2 has no row
    stored = await store.observations(["n1", "n2"])
    assert list(stored) == ["n1"]
    moved = stored["n1"][REDFISH]
    assert (moved.sequence, moved.observed_at, moved.readable) == (9, _at(60), False)
    assert (moved.error, moved.unreadable_since) == ("timeout", _at(60))
    assert (moved.components, moved.conflicts, moved.members) == (
        REPORT.components,
        REPORT.conflicts,
        REPORT.members,
    )
    assert (await store.heads(["n1"]))[("n1", REDFISH)].digest == content_digest(REPORT)


async def test_history_is_appended(backend: Backend) -> None:
    rows: list[HistoryRow] = [
        ("n1", "redfish", "BMC_Fw", None, "b1", _at(0)),
        ("n1", "redfish", "readable", None, "true", _at(0)),
        ("n1", "redfish", "BMC_Fw", "b1", "b2", _at(5)),
    ]
    await backend.store.append_history(rows[:2])
    await backend.store.append_history(rows[2:])
    await backend.store.append_history([])
    assert sorted(await backend.history(), key=repr) == sorted(rows, key=repr)


async def test_locks_name_registered_nodes_and_when_they_were_judged(backend: Backend) -> None:
    store = backend.store
    await backend.register([N1, N2, N3])
    locked = await store.lock_nodes(["n2", "n9", "n1", "n2"])
    assert list(locked.items()) == [("n1", N1), ("n2", N2)]
    assert await store.lock_nodes_judged(["n1", "n2"]) == ({"n1": N1, "n2": N2}, {})
    row = DriftRow("a" * 64, (), _at(0), _at(30))
    await store.save_drift({"n1": row})
    assert await store.lock_nodes_judged(["n1", "n2"]) == ({"n1": N1, "n2": N2}, {"n1": _at(30)})
    assert await store.nodes_in_site("ams1") == ["n1", "n2"]
    assert await store.nodes_in_site("nowhere") == []


async def test_drift_sets_are_stored_and_replaced(backend: Backend) -> None:
    store = backend.store
    item = DriftItem(
        component=C.BMC,
        expected="b2",
        actual="b1",
        kind=DriftKind.UNEXPECTED,
        severity=Severity.CRITICAL,
        detail="version differs from pin",
    )
    drifted = DriftRow("a" * 64, (item,), _at(0), _at(0))
    await store.save_drift({"n1": drifted, "n2": DriftRow(None, (), _at(0), _at(0))})
    assert await store.drift(["n1", "n3"]) == {"n1": drifted}
    resolved = DriftRow("a" * 64, (), _at(9), _at(9))
    await store.save_drift({"n1": resolved})
    await store.save_drift({})
    assert await store.drift(["n1", "n2"]) == {
        "n1": resolved,
        "n2": DriftRow(None, (), _at(0), _at(0)),
    }


def _pin(hash_char: str, seq: int, at: dt.datetime, **scope: tuple[str, ...]) -> Pin:
    return Pin(
        "ams1",
        ScopeSelector(**scope),
        hash_char * 64,
        {"gb200": {C.BMC: f"b-{hash_char}"}},
        seq,
        at,
        rollout_id="r1" if hash_char == "b" else None,
    )


async def test_a_pin_is_kept_only_when_later_in_the_stream_than_the_one_holding_its_scope(
    backend: Backend,
) -> None:
    store = backend.store
    newest = _pin("b", 7, _at(0))
    # Earlier in the stream: refused however late its sender dated it.
    older, same_seq = _pin("a", 6, _at(3600)), _pin("c", 7, _at(60))
    pools = _pin("d", 2, _at(0), pools=("train",))
    key = scope_key(newest.scope)
    assert await store.save_pin(newest, key, uuid.uuid4())
    assert not await store.save_pin(older, key, uuid.uuid4())
    assert not await store.save_pin(same_seq, key, uuid.uuid4())
    assert await store.save_pin(pools, scope_key(pools.scope), uuid.uuid4())
    assert sorted(await store.pins(), key=lambda p: p.stack_hash) == [newest, pools]
    later = _pin("e", 8, _at(-3600))  # later in the stream, dated earlier: replaces
    assert await store.save_pin(later, key, uuid.uuid4())
    assert sorted(await store.pins(), key=lambda p: p.stack_hash) == [pools, later]


async def test_waves_end_for_good_and_the_latest_joined_is_active(backend: Backend) -> None:
    store = backend.store
    assert sorted(await store.start_wave("r1", 0, ["n1", "n2"], 1)) == ["n1", "n2"]
    assert await store.start_wave("r2", 0, ["n1"], 10) == ["n1"]
    assert await store.rollout_facts(["n1", "n2", "n3"]) == {
        "n1": RolloutFacts("r2"),
        "n2": RolloutFacts("r1"),
    }
    assert sorted(await store.end_wave("r1", 0)) == ["n1", "n2"]
    assert await store.start_wave("r1", 0, ["n1"], 20) == []  # late: stays ended
    assert await store.start_wave("r1", 1, ["n2"], 20) == ["n2"]
    assert await store.end_rollout("r1") == ["n2"]
    assert await store.start_wave("r1", 2, ["n2"], 30) == []  # the rollout ended
    assert await store.end_wave("r9", 0) == []
    assert await store.rollout_facts(["n1", "n2"]) == {"n1": RolloutFacts("r2")}


async def test_a_wave_planned_earlier_in_the_stream_does_not_move_its_nodes_back(
    backend: Backend,
) -> None:
    store = backend.store
    assert await store.start_wave("r1", 1, ["n1"], 12) == ["n1"]
    assert await store.start_wave("r1", 0, ["n1", "n2"], 11) == ["n2"]  # retried late
    assert await store.end_wave("r1", 0) == ["n2"]  # n1 stayed in wave 1
    assert await store.rollout_facts(["n1", "n2"]) == {"n1": RolloutFacts("r1")}


async def test_a_wave_naming_a_node_twice_starts_it_once(backend: Backend) -> None:
    # PostgreSQL refuses an upsert that touches one row twice ("cannot affect row a second
    # time"): such a wave.planned was retried to the dead-letter queue.
    assert await backend.store.start_wave("r1", 0, ["n1", "n2", "n1"], 1) == ["n1", "n2"]
    assert await backend.store.rollout_facts(["n1"]) == {"n1": RolloutFacts("r1")}


async def test_a_rollout_step_is_recorded_unless_a_later_one_is(backend: Backend) -> None:
    store = backend.store
    assert await store.record_change("n1", C.BMC, "b2", "r1", 10)
    assert not await store.record_change("n1", C.BMC, "b1", "r1", 5)  # earlier, late
    assert not await store.record_change("n1", C.BMC, "b9", "r1", 10)  # the same event again
    assert await store.record_change("n1", C.BMC, "b3", "r1", 11)
    assert await store.record_change("n1", C.NIC, "28.1", "r1", 1)
    assert await store.rollout_facts(["n1", "n2"]) == {
        "n1": RolloutFacts(None, {C.BMC: "b3", C.NIC: "28.1"})
    }
