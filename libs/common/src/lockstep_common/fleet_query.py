"""The fleet, asked of the inventory over core-NATS request/reply (``fleet.query``): the one
client every service that needs the fleet uses (planner: the scope's nodes; updater: one node
right before it acts on it, design.md non-negotiable 4; healthgate: profiles and versions for
stragglers). No service reads the inventory's tables.

Pages hold at most ``MAX_FLEET_PAGE`` nodes, so every answer stays under NATS's payload limit
(issue 10, deliverable 1). An inventory that does not answer, or answers with an error or
something else than an answer, is "not now": :class:`InventoryUnavailable`, a transient error
(and an ``OSError``, like the other unreachable peers a step retries).
"""

from __future__ import annotations

import json

from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError

from lockstep_common import subjects
from lockstep_common.envelope import make_envelope
from lockstep_common.errors import InvalidMessage, TransientError
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import (
    MAX_FLEET_PAGE,
    FleetNode,
    FleetQueryAnswered,
    FleetQueryRequested,
    ScopeSelector,
)
from lockstep_common.subjects import Namespace

MAX_REPLY_BYTES = 8 << 20
"""A page of ``MAX_FLEET_PAGE`` nodes stays well below this."""
MAX_PAGES = 10_000
"""12,500 nodes are 25 pages; a cursor that never ends is a bug on the other side."""


class InventoryUnavailable(TransientError, OSError):
    """No usable answer from the inventory."""


class FleetQuery:
    """``fleet.query`` requests on the service's NATS connection, as ``source``."""

    def __init__(
        self, nc: NatsClient, namespace: Namespace, source: str, *, timeout_s: float = 10.0
    ) -> None:
        self._nc = nc
        self._subject = namespace.wire(subjects.fleet_query())
        self._source = source
        self._timeout_s = timeout_s

    async def nodes(self, scope: ScopeSelector | None) -> list[FleetNode]:
        """Every node ``scope`` selects (None: the whole fleet), page by page."""
        out: list[FleetNode] = []
        after: str | None = None
        for _ in range(MAX_PAGES):
            page = await self._ask(
                FleetQueryRequested(scope=scope, after=after, limit=MAX_FLEET_PAGE)
            )
            out.extend(page.nodes)
            if page.next_after is None:
                return out
            after = page.next_after
        raise InventoryUnavailable(f"fleet.query did not end after {MAX_PAGES} pages")

    async def node(self, node_id: str) -> FleetNode | None:
        """The node as registered now; None when the inventory does not know it."""
        page = await self._ask(FleetQueryRequested(scope=ScopeSelector(nodes=(node_id,)), limit=1))
        return next((n for n in page.nodes if n.node_id == node_id), None)

    async def _ask(self, request: FleetQueryRequested) -> FleetQueryAnswered:
        env = make_envelope(request, source=self._source)
        try:
            reply = await self._nc.request(self._subject, env.to_json(), timeout=self._timeout_s)
        except (NatsError, TimeoutError) as exc:
            raise InventoryUnavailable(
                f"no answer on {self._subject} ({type(exc).__name__}): is the inventory running?"
            ) from None
        error = (reply.headers or {}).get("Lockstep-Error")
        if error is not None:
            raise InventoryUnavailable(f"inventory refused fleet.query: {error}")
        try:
            answer = REGISTRY.decode(reply.data, max_bytes=MAX_REPLY_BYTES).data
        except InvalidMessage as exc:
            body = reply.data[:200].decode("utf-8", "replace")
            raise InventoryUnavailable(
                f"unexpected fleet.query reply: {exc}: {json.dumps(body)}"
            ) from None
        if not isinstance(answer, FleetQueryAnswered):
            raise InventoryUnavailable(f"unexpected fleet.query reply type {type(answer).__name__}")
        return answer
