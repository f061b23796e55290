"""The updater's operator commands (``lockstep node history|release|approve-remedy``), answered
over the bus by ``lockstep_common.operator.OperatorResponder`` (``app.py`` adds them to the
service): the CLI reads and writes none of the updater's tables.

``node.release`` records who asked as the server authenticated it (the subject's identity),
beside the name the operator gave (which nobody checked); both writes are refused to the
reader and recorded in the updater's ``operator_requests``.
"""

from __future__ import annotations

from typing import Any

from lockstep_common.db import Conn
from lockstep_common.events.v1 import (
    NodeApproveRemedyAnswered,
    NodeApproveRemedyRequested,
    NodeHistoryAnswered,
    NodeHistoryRequested,
    NodeQuarantinedAnswered,
    NodeQuarantinedRequested,
    NodeReleaseAnswered,
    NodeReleaseRequested,
    QuarantinedNode,
    StepEntry,
)
from lockstep_common.operator import Asker, Command, Refusal
from lockstep_updater.adapters.repository import release_quarantined, release_remedy, step_history
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.store import NotQuarantined


async def node_history(
    conn: Conn, request: NodeHistoryRequested, asker: Asker
) -> NodeHistoryAnswered:
    """The node's most recent steps, oldest first."""
    del asker
    steps = await step_history(conn, request.node_id, request.limit)
    return NodeHistoryAnswered(
        steps=tuple(
            StepEntry(
                rollout_id=s.rollout_id,
                wave=s.wave,
                step=s.step,
                attempt=s.attempt,
                token=s.token,
                started_at=s.started_at,
                ended_at=s.ended_at,
                outcome=s.outcome,
                reason=s.reason,
            )
            for s in steps
        )
    )


async def node_release(
    conn: Conn, request: NodeReleaseRequested, asker: Asker
) -> NodeReleaseAnswered:
    """Record the release (``release_quarantined``); ``not_found`` when not quarantined."""
    said = f" ({request.operator})" if request.operator else ""
    reason = f"released by {asker.identity}{said}: {' '.join(request.reason.split())}"
    try:
        release_id = await release_quarantined(conn, request.node_id, reason)
    except NotQuarantined as exc:
        raise Refusal("not_found", str(exc)) from None
    return NodeReleaseAnswered(release_id=release_id)


async def node_quarantined(
    conn: Conn, request: NodeQuarantinedRequested, asker: Asker
) -> NodeQuarantinedAnswered:
    """The nodes whose latest work item ended quarantined (those ``node.release`` would give
    back), a page in node id order after ``request.after``."""
    del asker
    rows = await conn.fetch(
        "SELECT node_id, rollout_id, wave, updated_at AS since, reason FROM ("
        " SELECT DISTINCT ON (node_id) node_id, rollout_id, wave, state, updated_at, reason"
        " FROM node_work WHERE node_id > coalesce($1, '') ORDER BY node_id, id DESC"
        ") latest WHERE state = $2 ORDER BY node_id LIMIT $3",
        request.after,
        NodeStep.QUARANTINED.value,
        request.limit + 1,
    )
    page = [QuarantinedNode(**dict(r)) for r in rows[: request.limit]]
    more = len(rows) > request.limit
    return NodeQuarantinedAnswered(
        nodes=tuple(page), next_after=page[-1].node_id if more and page else None
    )


async def node_approve_remedy(
    conn: Conn, request: NodeApproveRemedyRequested, asker: Asker
) -> NodeApproveRemedyAnswered:
    """Release the node's GSP runbook item held for approval."""
    del asker
    if not await release_remedy(conn, request.node_id):
        raise Refusal("not_found", f"no GSP remedy waits for approval on {request.node_id}")
    return NodeApproveRemedyAnswered(node_id=request.node_id)


COMMANDS: tuple[Command[Any], ...] = (
    Command("node.history", NodeHistoryRequested, NodeHistoryAnswered, node_history),
    Command("node.release", NodeReleaseRequested, NodeReleaseAnswered, node_release, writes=True),
    Command(
        "node.quarantined", NodeQuarantinedRequested, NodeQuarantinedAnswered, node_quarantined
    ),
    Command(
        "node.approve-remedy",
        NodeApproveRemedyRequested,
        NodeApproveRemedyAnswered,
        node_approve_remedy,
        writes=True,
    ),
)
