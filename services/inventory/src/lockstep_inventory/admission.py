"""``admission.check`` request/reply (core NATS): may a job's nodes run the job's stack?

A scheduler prolog asks with an ``admission.check.requested`` envelope and gets an
``admission.check.answered`` envelope back, one verdict per node with every reason it was
refused. A request that cannot be decoded gets ``{"error": "..."}`` naming what is wrong and
a ``Lockstep-Error`` header; nothing is changed either way (the check only reads).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from typing import cast

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from lockstep_common import subjects
from lockstep_common.db import Conn
from lockstep_common.envelope import Envelope, make_envelope
from lockstep_common.errors import InvalidMessage
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import AdmissionCheckAnswered, AdmissionCheckRequested
from lockstep_common.service import Resources
from lockstep_common.subjects import Namespace
from lockstep_inventory.adapters import state
from lockstep_inventory.domain.evaluate import RolloutFacts, admission

log = logging.getLogger(__name__)
QUEUE = "inventory-admission"  # every replica answers, each request once
MAX_REQUEST_BYTES = 1 << 20


async def answer(
    conn: Conn, request: AdmissionCheckRequested, *, now: dt.datetime, max_age: dt.timedelta
) -> AdmissionCheckAnswered:
    """One verdict per requested node, in the order asked (read-only)."""
    ids = list(dict.fromkeys(request.node_ids))
    # One snapshot: a sweep committing between the reads must not mix old reports with new
    # drift in one verdict.
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        nodes = await state.nodes(conn, ids)
        stack = await state.stack(conn, request.stack_hash)
        observed = await state.observations(conn, ids)
        drift = await state.drift(conn, ids)
        facts = await state.rollout_facts(conn, ids)
    return AdmissionCheckAnswered(
        stack_hash=request.stack_hash,
        nodes=tuple(
            admission(
                node_id,
                nodes.get(node_id),
                request.stack_hash,
                stack,
                observed.get(node_id, {}),
                drift[node_id].items if node_id in drift else (),
                facts.get(node_id, RolloutFacts()),
                now=now,
                max_age=max_age,
            )
            for node_id in ids
        ),
    )


class AdmissionResponder:
    """A service worker answering admission checks until the service stops."""

    def __init__(self, namespace: Namespace, source: str, max_age_s: float) -> None:
        self._subject = namespace.wire(subjects.admission_check())
        self._source = source
        self._max_age = dt.timedelta(seconds=max_age_s)
        self._resources: Resources | None = None

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        self._resources = resources
        sub = await resources.nc.subscribe(self._subject, queue=QUEUE, cb=self._handle)
        try:
            await stopping.wait()
        finally:
            await sub.unsubscribe()

    async def _handle(self, msg: Msg) -> None:
        if not msg.reply or self._resources is None:
            return
        nc = self._resources.nc
        try:
            request = decode_request(msg.data)
        except InvalidMessage as exc:
            await _refuse(nc, msg, str(exc))
            return
        try:
            async with self._resources.pool.acquire() as conn:
                verdict = await answer(
                    conn, request.data, now=dt.datetime.now(dt.UTC), max_age=self._max_age
                )
        except Exception as exc:
            log.exception("admission check failed")  # the asker must hear why, not time out
            await _refuse(nc, msg, f"inventory could not answer: {type(exc).__name__}: {exc}")
            return
        reply = make_envelope(verdict, source=self._source, correlation_id=str(request.event_id))
        await nc.publish(msg.reply, reply.to_json())


def decode_request(payload: bytes) -> Envelope[AdmissionCheckRequested]:
    """The request envelope; :class:`InvalidMessage` naming what is wrong otherwise."""
    env = REGISTRY.decode(payload, max_bytes=MAX_REQUEST_BYTES)
    if not isinstance(env.data, AdmissionCheckRequested):
        raise InvalidMessage(f"expected admission.check.requested, got {env.type}")
    return cast("Envelope[AdmissionCheckRequested]", env)


async def _refuse(nc: NatsClient, msg: Msg, reason: str) -> None:
    await nc.publish(
        msg.reply,
        json.dumps({"error": reason}).encode(),
        headers={"Lockstep-Error": reason[:200].replace("\n", " ")},
    )
