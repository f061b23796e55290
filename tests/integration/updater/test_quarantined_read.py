"""``node.quarantined`` (issue 32: the console's fleet page lists quarantined nodes): the nodes
whose latest work item ended quarantined, exactly those ``node.release`` would give back, a
page at a time in node id order, read from the updater's PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pydantic
import pytest

from lockstep_common.events.v1 import NodeQuarantinedRequested
from lockstep_common.operator import Asker
from lockstep_updater.adapters.repository import release_quarantined
from lockstep_updater.operator_commands import node_quarantined
from tests.integration.updater.schema import migrated

pytestmark = pytest.mark.integration


@pytest.fixture
async def conn(servers: Any, namespace: str) -> AsyncIterator[asyncpg.Connection[Any]]:
    schema = await migrated(servers.database_url, namespace)
    c = await asyncpg.connect(servers.database_url)
    try:
        await c.execute(f'SET search_path TO "{schema}"')
        yield c
    finally:
        await c.close()


async def item(conn: Any, rollout: str, node: str, state: str, reason: str = "") -> None:
    await conn.execute(
        "INSERT INTO node_work (rollout_id, wave, node_id, components, state, reason)"
        " VALUES ($1, 0, $2, '{driver}', $3, $4)",
        rollout,
        node,
        state,
        reason,
    )


async def test_quarantined_nodes_are_those_a_release_would_give_back_in_pages(conn: Any) -> None:
    asker = Asker("updater", "reader", uuid.uuid4(), datetime.now(UTC))
    await item(conn, "r-1", "n-a", "quarantined", "verify failed twice")
    await item(conn, "r-1", "n-b", "quarantined", "flash timed out")
    await item(conn, "r-1", "n-c", "done")
    await item(conn, "r-1", "n-d", "quarantined", "bmc unreachable")
    await item(conn, "r-0", "n-e", "quarantined", "old")
    await item(conn, "r-2", "n-e", "done")  # quarantined once, done since: not now
    await item(conn, "r-1", "n-f", "quarantined", "<script>x</script>")
    await release_quarantined(conn, "n-b", "released by cli")  # on its way back: not listed

    first = await node_quarantined(conn, NodeQuarantinedRequested(limit=2), asker)
    assert [(n.node_id, n.rollout_id, n.reason) for n in first.nodes] == [
        ("n-a", "r-1", "verify failed twice"),
        ("n-d", "r-1", "bmc unreachable"),
    ]
    assert first.next_after == "n-d"
    rest = await node_quarantined(
        conn, NodeQuarantinedRequested(after=first.next_after, limit=2), asker
    )
    assert [n.node_id for n in rest.nodes] == ["n-f"] and rest.next_after is None
    assert rest.nodes[0].reason == "<script>x</script>"  # as recorded; pages escape it


@pytest.mark.parametrize("bad", [{"after": "n.*"}, {"after": ">"}, {"limit": 0}, {"limit": 501}])
def test_a_hostile_request_is_refused_before_any_read(bad: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        NodeQuarantinedRequested.model_validate(bad)
