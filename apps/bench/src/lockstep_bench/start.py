"""Start a rollout as an operator does (``lockstep rollout start``): a ``rollout.start``
request to the planner on ``ops.<identity>.planner.rollout.start``, answered with the planner's
decision (issue 26: the ``cli`` identity may no longer publish ``intent.submitted`` itself).

The benches that time a rollout from its start use this, so they measure the path operators
take: the intent recorded by the planner's own command and planned at once by its worker's code.
"""

from __future__ import annotations

import uuid

from nats.aio.client import Client

from lockstep_common import subjects
from lockstep_common.envelope import make_envelope, source_of
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import (
    OpsRefused,
    PlanAsk,
    RolloutStartAnswered,
    RolloutStartRequested,
)
from lockstep_common.subjects import Namespace

PLANNER = "planner"
MAX_REPLY_BYTES = 64 << 20  # a plan summary of a large fleet, as the CLI accepts


class StartRefused(RuntimeError):
    """The planner refused the request, or refused the intent."""


async def start_rollout(
    nc: Client,
    ns: Namespace,
    identity: str,
    ask: PlanAsk,
    *,
    approval_ref: str | None = None,
    timeout_s: float,
) -> uuid.UUID:
    """Ask the planner to plan and start ``ask`` as ``identity`` (the identity ``nc`` connected
    as: the server lets it ask under its own ``ops.<identity>.>`` only); the intent's id (the
    request's). A refusal, of the request or of the intent, raises ``StartRefused``; a pending
    decision (the fleet could not be read yet) is returned, the worker plans it later."""
    request = RolloutStartRequested(ask=ask, approval_ref=approval_ref, by="bench")
    env = make_envelope(request, source=source_of("cli"))
    subject = ns.wire(subjects.ops_request(identity, PLANNER, "rollout.start"))
    reply = await nc.request(subject, env.to_json(), timeout=timeout_s)
    data = REGISTRY.decode(reply.data, max_bytes=MAX_REPLY_BYTES).data
    if isinstance(data, OpsRefused):
        raise StartRefused(f"rollout.start refused ({data.kind}): {data.reason}")
    if not isinstance(data, RolloutStartAnswered):
        raise StartRefused(f"unexpected reply to rollout.start: {type(data).__name__}")
    if data.decision == "refused":
        raise StartRefused(f"the planner refused the intent: {'; '.join(data.reasons)}")
    return data.intent_id
