"""The ``NodeFacts`` port on the inventory's ``fleet.query`` request/reply (core NATS).

The updater asks for one node at a time, right before it acts on it, so the BMC address, its
plain-http allowance, the credentials reference and the pool are never older than the step
(design.md non-negotiable 4). An inventory that does not answer, or answers with an error, is
"not now" (``TransientError``): the step runs again later.
"""

from __future__ import annotations

from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError

from lockstep_common import subjects
from lockstep_common.envelope import make_envelope
from lockstep_common.errors import InvalidMessage, TransientError
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import (
    FleetNode,
    FleetQueryAnswered,
    FleetQueryRequested,
    ScopeSelector,
)
from lockstep_common.subjects import Namespace

MAX_ANSWER_BYTES = 8 << 20  # a page of MAX_FLEET_PAGE nodes stays well below this


class InventoryUnavailable(TransientError, OSError):
    """No usable answer from the inventory."""


class FleetQueryFacts:
    """``NodeFacts`` by ``fleet.query`` requests on ``nc``."""

    def __init__(
        self, nc: NatsClient, namespace: Namespace, source: str, *, timeout_s: float = 5.0
    ) -> None:
        self._nc = nc
        self._subject = namespace.wire(subjects.fleet_query())
        self._source = source
        self._timeout_s = timeout_s

    async def node(self, node_id: str) -> FleetNode | None:
        request = FleetQueryRequested(scope=ScopeSelector(nodes=(node_id,)), limit=1)
        payload = make_envelope(request, source=self._source).to_json()
        try:
            reply = await self._nc.request(self._subject, payload, timeout=self._timeout_s)
        except (NatsError, TimeoutError) as exc:
            raise InventoryUnavailable(f"fleet.query for {node_id}: {exc!r}") from None
        error = (reply.headers or {}).get("Lockstep-Error")
        if error:
            raise InventoryUnavailable(f"fleet.query for {node_id}: {error}")
        try:
            env = REGISTRY.decode(reply.data, max_bytes=MAX_ANSWER_BYTES)
        except InvalidMessage as exc:
            raise InventoryUnavailable(f"fleet.query for {node_id}: {exc}") from None
        if not isinstance(env.data, FleetQueryAnswered):
            raise InventoryUnavailable(f"fleet.query for {node_id}: answered {env.type}")
        return next((n for n in env.data.nodes if n.node_id == node_id), None)
