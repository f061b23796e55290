"""The fleet, asked of the inventory over core-NATS request/reply (``fleet.query``), a page of
at most ``MAX_FLEET_PAGE`` nodes at a time so every answer stays under NATS's payload limit
(issue 10, deliverable 1: "request/reply to inventory that pages under NATS's payload limit").
The planner never reads the inventory's tables."""

from __future__ import annotations

import json

from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

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

MAX_REPLY_BYTES = 4 << 20
MAX_PAGES = 10_000
"""12,500 nodes are 25 pages; a cursor that never ends is a bug on the other side."""


class NatsFleet:
    """A ``store.FleetSource`` over the service's NATS connection."""

    def __init__(
        self, nc: NatsClient, namespace: Namespace, source: str, *, timeout_s: float = 10.0
    ) -> None:
        self._nc = nc
        self._subject = namespace.wire(subjects.fleet_query())
        self._source = source
        self._timeout_s = timeout_s

    async def nodes(self, scope: ScopeSelector | None) -> list[FleetNode]:
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
        raise TransientError(f"fleet.query did not end after {MAX_PAGES} pages")

    async def _ask(self, request: FleetQueryRequested) -> FleetQueryAnswered:
        env = make_envelope(request, source=self._source)
        try:
            reply = await self._nc.request(self._subject, env.to_json(), timeout=self._timeout_s)
        except (NatsTimeout, NoRespondersError, NatsError) as exc:
            raise TransientError(
                f"no answer on {self._subject} ({type(exc).__name__}): is the inventory running?"
            ) from None
        error = (reply.headers or {}).get("Lockstep-Error")
        if error is not None:
            raise TransientError(f"inventory refused fleet.query: {error}")
        try:
            answer = REGISTRY.decode(reply.data, max_bytes=MAX_REPLY_BYTES).data
        except InvalidMessage as exc:
            body = reply.data[:200].decode("utf-8", "replace")
            raise TransientError(
                f"unexpected fleet.query reply: {exc}: {json.dumps(body)}"
            ) from None
        if not isinstance(answer, FleetQueryAnswered):
            raise TransientError(f"unexpected fleet.query reply type {type(answer).__name__}")
        return answer
