"""``NodeAgent``: one node's report cycle, the same for a real node and a simulated one.

Each cycle reads the node (``read``: the real probes, or a simulator's model), makes its
inventory and health events, stores them in the spool together with the state they advance
(the inventory sequence, the XID cursor) in one transaction, then drains the spool to JetStream.
A crash at any point leaves either the old state and no reports of the cycle, or both: the
sequence never repeats and an XID is counted once (see ``spool``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from lockstep_agent.probes.node import NodeFacts
from lockstep_agent.probes.xid import Cursor
from lockstep_agent.reports import Counters, agent_source, health_event, inventory_event
from lockstep_agent.sender import Sender
from lockstep_agent.spool import Outgoing, Spool
from lockstep_common import subjects
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.subjects import Namespace

log = logging.getLogger(__name__)
SEQUENCE = "inventory_sequence"
XID_CURSOR = "xid_cursor"

Reader = Callable[[Cursor | None], NodeFacts]
"""Reads the node, counting XIDs after the cursor given."""


class NodeAgent:
    """One node's agent: ``cycle`` measures and spools a report pair; ``drain`` publishes.

    Args:
        node: the node id (its identity is ``agent-<node>``).
        site: the node's site.
        namespace: the deployment's namespace.
        read: reads the node's facts.
        spool: where reports wait for their acknowledgement.
        sender: publishes the spool (None: reports are only spooled).
        clock: the time stamped on reports.
    """

    def __init__(
        self,
        node: str,
        site: str,
        namespace: Namespace,
        read: Reader,
        spool: Spool,
        sender: Sender | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.node = subjects.token(node, "node id")
        self.site = subjects.token(site, "site")
        self._read = read
        self.spool = spool
        self.sender = sender
        self._clock = clock
        self._source = agent_source(node)
        self._inventory_subject = namespace.wire(subjects.inventory_observed(site, node))
        self._health_subject = namespace.wire(subjects.health_observed(site, node))
        self._counters = Counters()
        self.heartbeat = 0
        """Report cycles since this process started (resets on restart: evidence of one)."""

    def _cursor(self) -> Cursor | None:
        raw = self.spool.state(XID_CURSOR)
        return Cursor.model_validate_json(raw) if raw is not None else None

    def cycle(self) -> NodeFacts:
        """Read the node and spool its inventory and health reports; returns what was read."""
        facts = self._read(self._cursor())
        now = self._clock()
        sequence = int(self.spool.state(SEQUENCE) or 0) + 1
        self.heartbeat += 1
        inventory = inventory_event(self.node, self.site, facts, sequence, now)
        health = health_event(self.node, self.site, facts, self.heartbeat, self._counters, now)
        state = {SEQUENCE: str(sequence)}
        if facts.xids.cursor is not None:
            state[XID_CURSOR] = facts.xids.cursor.model_dump_json()
        dropped = self.spool.put(
            [
                self._outgoing(self._inventory_subject, inventory),
                self._outgoing(self._health_subject, health),
            ],
            state,
        )
        if dropped:
            log.warning("spool full: dropped the %d oldest reports", dropped)
        return facts

    def _outgoing(self, subject: str, data: EventData) -> Outgoing:
        env = make_envelope(data, source=self._source, subject=self.node)
        return Outgoing(subject, env.to_json(), str(env.event_id))

    async def drain(self) -> bool:
        """Publish the spool (True when it is empty afterwards)."""
        return await self.sender.drain() if self.sender is not None else False
