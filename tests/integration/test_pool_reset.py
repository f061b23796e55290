"""A pooled connection goes back without asyncpg's reset round trip only when nothing but one
ended transaction ran on it (``db.pooled_transaction``); a connection that held a session
advisory lock, listened on a channel, or whose transaction failed is still reset in full.
A one-statement unit of work (``PooledStore.statement``) sends its statement alone, and
refuses a second one, unsent, or an event."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from lockstep_common import db
from lockstep_common.events.v1 import RolloutHalted
from lockstep_common.stores import PooledStore
from tests.integration.statements import Sent

pytestmark = pytest.mark.integration
RESET = "pg_advisory_unlock_all"  # the first statement of asyncpg's reset query


@pytest.fixture
async def pool(servers: Any) -> AsyncIterator[asyncpg.Pool]:
    made = await db.create_pool(
        servers.database_url, "public", min_size=1, max_size=1, application_name="reset"
    )
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
def lock() -> int:
    """An advisory lock key of this test's own (tests run side by side on one server)."""
    return uuid.uuid4().int >> 65  # a positive bigint


@pytest.fixture
async def sent(pool: asyncpg.Pool) -> Sent:
    log = Sent()
    async with pool.acquire() as conn:  # the pool's only connection, from now on
        conn.add_query_logger(log)
    await log.taken()
    return log


async def test_a_connection_used_for_one_transaction_is_not_sent_the_reset(
    pool: asyncpg.Pool, sent: Sent, lock: int
) -> None:
    async with db.pooled_transaction(pool) as conn:
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock)
    queries = await sent.taken()
    assert queries == ["BEGIN;", "SELECT pg_advisory_xact_lock($1)", "COMMIT;"]
    async with pool.acquire() as conn:  # and the transaction's lock went with it
        assert await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", lock)


async def test_a_session_advisory_lock_is_released_with_the_connection(
    pool: asyncpg.Pool, sent: Sent, servers: Any, lock: int
) -> None:
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", lock)
    assert any(RESET in q for q in await sent.taken())
    other = await asyncpg.connect(servers.database_url)
    try:
        assert await other.fetchval("SELECT pg_try_advisory_lock($1)", lock)
        await other.execute("SELECT pg_advisory_unlock($1)", lock)
    finally:
        await other.close()


@pytest.mark.filterwarnings("ignore:.*active notification listener")  # given back listening
async def test_a_listening_connection_stops_listening_when_given_back(
    pool: asyncpg.Pool, sent: Sent
) -> None:
    async with pool.acquire() as conn:
        await conn.add_listener("lockstep_reset_test", lambda *_: None)
    assert any(RESET in q for q in await sent.taken())
    async with pool.acquire() as conn:
        assert await conn.fetch("SELECT pg_listening_channels()") == []


async def test_a_transaction_that_failed_is_reset_in_full(pool: asyncpg.Pool, sent: Sent) -> None:
    with pytest.raises(asyncpg.DivisionByZeroError):
        async with db.pooled_transaction(pool) as conn:
            await conn.execute("SET search_path TO pg_catalog")  # session-wide, not LOCAL
            await conn.fetchval("SELECT 1 / 0")
    assert any(RESET in q for q in await sent.taken())
    async with pool.acquire() as conn:
        assert await conn.fetchval("SHOW search_path") == "public"


async def test_the_mark_lasts_one_acquisition_only(
    pool: asyncpg.Pool, sent: Sent, lock: int
) -> None:
    async with db.pooled_transaction(pool) as conn:
        await conn.fetchval("SELECT 1")
    async with pool.acquire() as conn:  # the next user takes session state: reset again
        await conn.execute("SELECT pg_advisory_lock($1)", lock)
    queries = await sent.taken()
    assert [q for q in queries if RESET in q] == [queries[-1]]
    async with pool.acquire() as conn:
        held = (
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        )
        assert await conn.fetchval(held) == 0


async def test_one_statement_is_sent_alone_and_a_second_is_refused_unsent(
    pool: asyncpg.Pool, sent: Sent, lock: int
) -> None:
    store = PooledStore(pool, "/test", lambda conn, events: (conn, events))
    async with store.statement() as (conn, _):
        assert await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", lock)
    assert await sent.taken() == ["SELECT pg_try_advisory_xact_lock($1)"]  # no BEGIN, COMMIT
    with pytest.raises(RuntimeError, match="second statement"):
        async with store.statement() as (conn, _):
            await conn.execute(f"CREATE TABLE one_statement_{lock} (id int)")
            await conn.execute(f"DROP TABLE one_statement_{lock}")
    created, reset = await sent.taken()  # the block raised: the connection is reset in full
    assert created == f"CREATE TABLE one_statement_{lock} (id int)" and RESET in reset
    async with pool.acquire() as conn:  # the first committed on its own; drop it
        await conn.execute(f"DROP TABLE one_statement_{lock}")


async def test_an_event_in_one_statement_is_refused(pool: asyncpg.Pool) -> None:
    store = PooledStore(pool, "/test", lambda conn, events: (conn, events))
    with pytest.raises(RuntimeError, match="needs a transaction"):
        async with store.statement() as (_, events):
            events.emit(
                "lockstep.test",
                RolloutHalted(rollout_id="r-1", wave=0, reason="x", halted_by="test"),
            )
