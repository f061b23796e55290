"""Where the console's numbers come from: the services' answers to read commands, and nothing
else (issue 32). ``Source`` is the port the pages are written against; ``BusSource`` asks the
owning service over the bus as the read-only ``reader`` identity, exactly as ``lockstep rollout
status``, ``gate show --json``, ``fleet status``, ``fleet drift`` and ``node history`` do (the CLI's
standard-library client, ``lockstep_cli.nats_request``, on ``ops.<identity>.<service>.<command>``);
``testing.memory_source`` is a fake holding canned answers.

A service's ``ops.refused`` becomes :class:`Refused` (its kind and its one line); no answer, an
unreachable bus or an unexpected reply becomes :class:`Unavailable`. Reads change nothing, so a
request that got no reply is simply asked again once.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol, TypeVar

from lockstep_common.events.v1 import (
    FleetDriftAnswered,
    FleetDriftRequested,
    FleetStatusAnswered,
    FleetStatusRequested,
    FleetStragglersAnswered,
    FleetStragglersRequested,
    GateShowAnswered,
    GateShowRequested,
    NodeHistoryAnswered,
    NodeHistoryRequested,
    NodeQuarantinedAnswered,
    NodeQuarantinedRequested,
    RolloutAuditAnswered,
    RolloutAuditRequested,
    RolloutListAnswered,
    RolloutListRequested,
    RolloutStatusAnswered,
    RolloutStatusRequested,
)

if TYPE_CHECKING:
    from lockstep_common.envelope import EventData
    from lockstep_common.settings import ServiceSettings

A = TypeVar("A", bound="EventData")
MAX_REPLY_BYTES = 64 << 20
ATTEMPTS = 2


class Unavailable(Exception):
    """The service could not be asked (no answer, bus unreachable, an unexpected reply)."""


class Refused(Exception):
    """The service refused the read: ``kind`` (``not_found``, ``invalid``...) and why."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class Source(Protocol):
    """The read commands the pages use, as the services answer them."""

    async def rollouts(self, before: str | None) -> RolloutListAnswered: ...
    async def rollout(self, rollout_id: str) -> RolloutStatusAnswered: ...
    async def audit(self, rollout_id: str) -> RolloutAuditAnswered: ...
    async def gate(self, rollout_id: str) -> GateShowAnswered: ...
    async def fleet_status(self) -> FleetStatusAnswered: ...
    async def drift(self, after: str | None) -> FleetDriftAnswered: ...
    async def stragglers(self) -> FleetStragglersAnswered: ...
    async def node_history(self, node_id: str) -> NodeHistoryAnswered: ...
    async def quarantined(self, after: str | None) -> NodeQuarantinedAnswered: ...


class BusSource:
    """``Source`` over the bus, as the identity ``settings`` connect as (``reader``)."""

    def __init__(self, settings: ServiceSettings, *, timeout_s: float = 10.0) -> None:
        self._settings = settings
        self._timeout_s = timeout_s

    async def rollouts(self, before: str | None) -> RolloutListAnswered:
        req = RolloutListRequested(before=before)
        return await self._ask("planner", "rollout.list", req, RolloutListAnswered)

    async def rollout(self, rollout_id: str) -> RolloutStatusAnswered:
        req = RolloutStatusRequested(rollout_id=rollout_id)
        return await self._ask("planner", "rollout.status", req, RolloutStatusAnswered)

    async def audit(self, rollout_id: str) -> RolloutAuditAnswered:
        req = RolloutAuditRequested(rollout_id=rollout_id)
        return await self._ask("planner", "rollout.audit", req, RolloutAuditAnswered)

    async def gate(self, rollout_id: str) -> GateShowAnswered:
        req = GateShowRequested(rollout_id=rollout_id)
        return await self._ask("healthgate", "gate.show", req, GateShowAnswered)

    async def fleet_status(self) -> FleetStatusAnswered:
        req = FleetStatusRequested()
        return await self._ask("inventory", "fleet.status", req, FleetStatusAnswered)

    async def drift(self, after: str | None) -> FleetDriftAnswered:
        req = FleetDriftRequested(after=after)
        return await self._ask("inventory", "fleet.drift", req, FleetDriftAnswered)

    async def stragglers(self) -> FleetStragglersAnswered:
        req = FleetStragglersRequested()
        return await self._ask("healthgate", "fleet.stragglers", req, FleetStragglersAnswered)

    async def node_history(self, node_id: str) -> NodeHistoryAnswered:
        req = NodeHistoryRequested(node_id=node_id)
        return await self._ask("updater", "node.history", req, NodeHistoryAnswered)

    async def quarantined(self, after: str | None) -> NodeQuarantinedAnswered:
        req = NodeQuarantinedRequested(after=after)
        return await self._ask("updater", "node.quarantined", req, NodeQuarantinedAnswered)

    async def _ask(self, service: str, command: str, request: EventData, answer: type[A]) -> A:
        # The CLI's client is blocking (sockets): one request per worker thread.
        return await asyncio.to_thread(self._ask_blocking, service, command, request, answer)

    def _ask_blocking(self, service: str, command: str, request: EventData, answer: type[A]) -> A:
        from lockstep_cli import nats_request
        from lockstep_common import subjects
        from lockstep_common.envelope import make_envelope, source_of
        from lockstep_common.errors import InvalidMessage
        from lockstep_common.events import REGISTRY
        from lockstep_common.events.v1 import OpsRefused
        from lockstep_common.identities import READER
        from lockstep_common.subjects import Namespace

        access = self._settings.nats_access()
        # As `reader` even on a server without identities (a development server, where the
        # subject's identity is the only one there is): the services then run reads only.
        identity = self._settings.nats_user or READER
        subject = Namespace(self._settings.namespace).wire(
            subjects.ops_request(identity, service, command)
        )
        body = make_envelope(request, source=source_of("console")).to_json()
        for attempt in range(ATTEMPTS):
            try:
                reply = nats_request.request(
                    access, subject, body, self._timeout_s, name="lockstep-console"
                )
                break
            except nats_request.NoReply:
                if attempt + 1 == ATTEMPTS:
                    raise Unavailable(f"the {service} did not answer {command} in time") from None
            except nats_request.NoResponders:
                raise Unavailable(f"nobody answers {command}: is the {service} running?") from None
            except (nats_request.Refused, OSError) as exc:  # AccessError, Unreachable included
                raise Unavailable(f"{command}: {type(exc).__name__}: {exc}") from None
        try:
            data = REGISTRY.decode(reply.data, max_bytes=MAX_REPLY_BYTES).data
        except InvalidMessage as exc:
            raise Unavailable(f"unexpected reply to {command}: {exc}") from None
        if isinstance(data, OpsRefused):
            raise Refused(data.kind, data.reason)
        if not isinstance(data, answer):
            raise Unavailable(f"unexpected reply to {command}: {type(data).__name__}")
        return data
