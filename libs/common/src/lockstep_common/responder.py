"""Core-NATS request/reply answered by a service: one worker per request subject.

First the inventory's (``admission.check``, ``fleet.query``); operator commands use the same
side-by-side answering (``lockstep_common.operator``). Every replica subscribes in one queue
group, so each request is answered once. Requests are
answered side by side, up to the database pool's size at once: nats.py runs a subscription's
callback one message at a time, and answered inline every request waited for every read before
it. At 9,375 nodes in one wave (``bench rollout --nodes 12500``) the updater's ``fleet.query``
per step then queued past its 5 s timeout; the inventory went on answering requests whose
askers had given up (most after their reply permission had expired), the askers asked again,
and 55 of the wave's nodes got past their preflight in six minutes. A request that
cannot be decoded gets ``{"error": "..."}`` and a ``Lockstep-Error`` header naming what is wrong;
an answer that fails gets the same with the reason, never silence (the asker must not time out
for our fault). Answering only reads: nothing is changed either way. Only the owning service's
NATS identity may answer these subjects, and only to a request it received (``bus_access``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from lockstep_common.db import Conn
from lockstep_common.envelope import Envelope, EventData, make_envelope
from lockstep_common.errors import InvalidMessage
from lockstep_common.events import REGISTRY

if TYPE_CHECKING:
    from lockstep_common.service import Resources

log = logging.getLogger(__name__)
MAX_REQUEST_BYTES = 1 << 20
R = TypeVar("R", bound=EventData)
Answer = Callable[[Conn, R, dt.datetime], Awaitable[EventData]]


def decode(payload: bytes, request_class: type[R]) -> Envelope[R]:
    """The request envelope; :class:`InvalidMessage` naming what is wrong otherwise."""
    env = REGISTRY.decode(payload, max_bytes=MAX_REQUEST_BYTES)
    if not isinstance(env.data, request_class):
        raise InvalidMessage(f"expected {request_class.event_type}, got {env.type}")
    return env  # type: ignore[return-value]  # data checked just above


async def answer_side_by_side(
    resources: Resources,
    stopping: asyncio.Event,
    subscriptions: list[str],
    queue: str,
    handle: Callable[[Msg], Awaitable[None]],
    concurrency: int | None,
    subscribed: asyncio.Event | None = None,
) -> None:
    """Answer requests on ``subscriptions`` (one queue group) until ``stopping``, up to
    ``concurrency`` at once (None: the database pool's size), each with ``handle``; set
    ``subscribed`` once the server has every subscription (a request sent after that finds an
    answerer, where one sent before gets NATS's "no responders")."""
    slots = asyncio.Semaphore(concurrency or resources.pool.get_max_size())
    answering: set[asyncio.Task[None]] = set()

    async def then_free(msg: Msg) -> None:
        try:
            await handle(msg)
        except Exception:  # the reply could not be sent (the connection went): the asker retries
            log.exception("%s: no reply sent", msg.subject)
        finally:
            slots.release()

    async def dispatch(msg: Msg) -> None:
        # Waiting here for a free slot leaves the backlog in the subscription's queue, in the
        # order the requests came.
        await slots.acquire()
        task = asyncio.create_task(then_free(msg))
        answering.add(task)
        task.add_done_callback(answering.discard)

    subs = [await resources.nc.subscribe(s, queue=queue, cb=dispatch) for s in subscriptions]
    if subscribed is not None:
        await resources.nc.flush()  # the server has processed our SUBs
        subscribed.set()
    try:
        await stopping.wait()
    finally:
        for sub in subs:
            await sub.unsubscribe()
        await asyncio.gather(*answering, return_exceptions=True)


class Responder(Generic[R]):
    """A service worker answering one request subject until the service stops."""

    def __init__(
        self,
        subject: str,
        request_class: type[R],
        answer: Answer[R],
        *,
        source: str,
        queue: str,
        concurrency: int | None = None,
    ) -> None:
        self._subject = subject
        self._request_class = request_class
        self._answer = answer
        self._source = source
        self._queue = queue
        self._concurrency = concurrency  # None: the database pool's size
        self._resources: Resources | None = None

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        self._resources = resources
        await answer_side_by_side(
            resources, stopping, [self._subject], self._queue, self._handle, self._concurrency
        )

    async def _handle(self, msg: Msg) -> None:
        if not msg.reply or self._resources is None:
            return
        nc = self._resources.nc
        try:
            request = decode(msg.data, self._request_class)
        except InvalidMessage as exc:
            await refuse(nc, msg, str(exc))
            return
        try:
            async with self._resources.pool.acquire() as conn:
                answer = await self._answer(conn, request.data, dt.datetime.now(dt.UTC))
        except Exception as exc:
            log.exception("%s failed", self._subject)
            await refuse(
                nc,
                msg,
                f"{self._source.rsplit('/', 1)[-1]} could not answer: {type(exc).__name__}: {exc}",
            )
            return
        reply = make_envelope(answer, source=self._source, correlation_id=str(request.event_id))
        await nc.publish(msg.reply, reply.to_json())


async def refuse(nc: NatsClient, msg: Msg, reason: str) -> None:
    """Answer with the reason the request cannot be served."""
    await nc.publish(
        msg.reply,
        json.dumps({"error": reason}).encode(),
        headers={"Lockstep-Error": reason[:200].replace("\n", " ")},
    )
