"""``admission.check`` request/reply (core NATS): may a job's nodes run the job's stack?

A scheduler prolog asks with an ``admission.check.requested`` envelope and gets an
``admission.check.answered`` envelope back, one verdict per node with every reason it was
refused. A request that cannot be decoded gets ``{"error": "..."}`` naming what is wrong and
a ``Lockstep-Error`` header; nothing is changed either way (the check only reads).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from lockstep_common import subjects
from lockstep_common.db import Conn
from lockstep_common.envelope import Envelope
from lockstep_common.events.v1 import AdmissionCheckAnswered, AdmissionCheckRequested
from lockstep_common.subjects import Namespace
from lockstep_inventory.adapters import state
from lockstep_inventory.domain.evaluate import RolloutFacts, admission
from lockstep_inventory.responder import Responder, decode

log = logging.getLogger(__name__)
QUEUE = "inventory-admission"  # every replica answers, each request once


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


def admission_responder(namespace: Namespace, source: str, max_age_s: float) -> Responder[Any]:
    """The worker answering ``admission.check``."""
    max_age = dt.timedelta(seconds=max_age_s)

    async def respond(
        conn: Conn, request: AdmissionCheckRequested, now: dt.datetime
    ) -> AdmissionCheckAnswered:
        return await answer(conn, request, now=now, max_age=max_age)

    return Responder(
        namespace.wire(subjects.admission_check()),
        AdmissionCheckRequested,
        respond,
        source=source,
        queue=QUEUE,
    )


def decode_request(payload: bytes) -> Envelope[AdmissionCheckRequested]:
    """The request envelope; :class:`InvalidMessage` naming what is wrong otherwise."""
    return decode(payload, AdmissionCheckRequested)
