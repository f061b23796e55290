"""``NodeAgent``: one node's report cycle, the same for a real node and a simulated one.

Each cycle reads the node (``read``: the real probes, or a simulator's model of the node) into
a ``Reading``, makes its inventory and health events, and stores them in the node's buffer
together with the state they advance (the inventory sequence, the XID cursor) in one
transaction. Publishing the buffer is ``sender.Sender``'s (one pass for one node, or for a
simulated fleet's thousands). A crash at any point leaves either the old state and no reports
of the cycle, or both: the sequence never repeats and an XID is counted once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from lockstep_agent.probes.node import NodeFacts
from lockstep_agent.probes.xid import Cursor
from lockstep_agent.reports import Counters, agent_source, health_event, inventory_event
from lockstep_agent.spool import Outgoing, ReportBuffer
from lockstep_common import subjects
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.events.v1 import HealthObserved, InventoryObserved
from lockstep_common.subjects import Namespace

log = logging.getLogger(__name__)
SEQUENCE = "inventory_sequence"
XID_CURSOR = "xid_cursor"


class Reading(Protocol):
    """One reading of a node, able to say itself as the two events."""

    @property
    def xid_cursor(self) -> Cursor | None:
        """Where the XIDs this reading counted end (None: it reads no kernel log)."""
        ...

    def inventory(self, node: str, site: str, sequence: int, now: datetime) -> InventoryObserved:
        """The inventory report."""
        ...

    def health(self, node: str, site: str, heartbeat: int, now: datetime) -> HealthObserved:
        """The health report."""
        ...


@dataclass(frozen=True, slots=True)
class ProbedReading:
    """A real node's reading: the probes' facts (``reports`` turns them into events)."""

    facts: NodeFacts
    counters: Counters

    @property
    def xid_cursor(self) -> Cursor | None:
        return self.facts.xids.cursor

    def inventory(self, node: str, site: str, sequence: int, now: datetime) -> InventoryObserved:
        return inventory_event(node, site, self.facts, sequence, now)

    def health(self, node: str, site: str, heartbeat: int, now: datetime) -> HealthObserved:
        return health_event(node, site, self.facts, heartbeat, self.counters, now)


Reader = Callable[[Cursor | None], Reading]
"""Reads the node, counting XIDs after the cursor given."""


class NodeAgent:
    """One node's agent: ``cycle`` measures and buffers a report pair.

    Args:
        node: the node id (its identity is ``agent-<node>``).
        site: the node's site.
        namespace: the deployment's namespace.
        read: reads the node.
        spool: where reports wait for their acknowledgement.
        clock: the time stamped on reports.
    """

    def __init__(
        self,
        node: str,
        site: str,
        namespace: Namespace,
        read: Reader,
        spool: ReportBuffer,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.node = subjects.token(node, "node id")
        self.site = subjects.token(site, "site")
        self._read = read
        self.spool = spool
        self._clock = clock
        self._source = agent_source(node)
        self._inventory_subject = namespace.wire(subjects.inventory_observed(site, node))
        self._health_subject = namespace.wire(subjects.health_observed(site, node))
        self.heartbeat = 0
        """Report cycles since this process started (resets on restart: evidence of one)."""

    @property
    def sequence(self) -> int:
        """The last inventory sequence buffered."""
        return int(self.spool.state(SEQUENCE) or 0)

    def _cursor(self) -> Cursor | None:
        raw = self.spool.state(XID_CURSOR)
        return Cursor.model_validate_json(raw) if raw is not None else None

    def cycle(self) -> Reading:
        """Read the node and buffer its inventory and health reports; returns the reading."""
        reading = self._read(self._cursor())
        now = self._clock()
        sequence = self.sequence + 1
        self.heartbeat += 1
        inventory = reading.inventory(self.node, self.site, sequence, now)
        health = reading.health(self.node, self.site, self.heartbeat, now)
        state = {SEQUENCE: str(sequence)}
        if reading.xid_cursor is not None:
            state[XID_CURSOR] = reading.xid_cursor.model_dump_json()
        dropped = self.spool.put(
            [
                self._outgoing(self._inventory_subject, inventory),
                self._outgoing(self._health_subject, health),
            ],
            state,
        )
        if dropped:
            log.debug("%s: buffer full, dropped the %d oldest reports", self.node, dropped)
        return reading

    def _outgoing(self, subject: str, data: EventData) -> Outgoing:
        env = make_envelope(data, source=self._source, subject=self.node)
        return Outgoing(subject, env.to_json(), str(env.event_id))
