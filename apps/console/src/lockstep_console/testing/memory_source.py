"""``Source`` holding canned answers, for tests and screenshots: what the services would have
answered. Fields may be replaced while a console serves them (a wave progressing); a rollout
not held is ``not_found``, as the planner answers."""

from __future__ import annotations

from dataclasses import dataclass, field

from lockstep_common.events.v1 import (
    Conformance,
    FleetDriftAnswered,
    FleetStatusAnswered,
    FleetStragglersAnswered,
    GateShowAnswered,
    NodeHistoryAnswered,
    NodeQuarantinedAnswered,
    RolloutAuditAnswered,
    RolloutListAnswered,
    RolloutState,
    RolloutStatusAnswered,
)
from lockstep_console.source import Refused

EMPTY_FLEET = FleetStatusAnswered(
    fleet=Conformance(
        nodes=0, conforming=0, drifted=0, unreadable=0, unobserved=0, conformance_ratio=1.0
    ),
    groups=(),
    drifted_by_kind={},
    sweep=None,
    sweep_running=False,
    last_finished_sweep=None,
)


@dataclass
class MemorySource:
    rollout_states: dict[str, RolloutState] = field(default_factory=dict)
    audits: dict[str, RolloutAuditAnswered] = field(default_factory=dict)
    gates: dict[str, GateShowAnswered] = field(default_factory=dict)
    status: FleetStatusAnswered = EMPTY_FLEET
    drift_pages: dict[str | None, FleetDriftAnswered] = field(default_factory=dict)
    straggler_findings: FleetStragglersAnswered = field(
        default_factory=lambda: FleetStragglersAnswered(findings=())
    )
    histories: dict[str, NodeHistoryAnswered] = field(default_factory=dict)
    quarantined_pages: dict[str | None, NodeQuarantinedAnswered] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    async def rollouts(self, before: str | None) -> RolloutListAnswered:
        from lockstep_common.events.v1 import RolloutListed

        self.asked.append("rollout.list")
        rows = [
            RolloutListed(
                rollout_id=s.rollout_id,
                state=s.state,
                change_class=s.change_class,
                bundle=s.stack_hash[:12],
                nodes=sum(w.nodes for w in s.waves),
                approvals=len(s.approvals),
                approvals_needed=s.approvals_needed,
                created_at=s.created_at,
                updated_at=s.updated_at,
                reason=s.reason,
            )
            for s in sorted(self.rollout_states.values(), key=lambda s: s.created_at, reverse=True)
        ]
        return RolloutListAnswered(rollouts=tuple(rows))

    async def rollout(self, rollout_id: str) -> RolloutStatusAnswered:
        self.asked.append("rollout.status")
        state = self.rollout_states.get(rollout_id)
        if state is None:
            raise Refused("not_found", f"no rollout {rollout_id}")
        return RolloutStatusAnswered(rollout=state)

    async def audit(self, rollout_id: str) -> RolloutAuditAnswered:
        self.asked.append("rollout.audit")
        return self.audits.get(rollout_id, RolloutAuditAnswered(entries=()))

    async def gate(self, rollout_id: str) -> GateShowAnswered:
        self.asked.append("gate.show")
        return self.gates.get(rollout_id, GateShowAnswered(verdicts=()))

    async def fleet_status(self) -> FleetStatusAnswered:
        self.asked.append("fleet.status")
        return self.status

    async def drift(self, after: str | None) -> FleetDriftAnswered:
        self.asked.append("fleet.drift")
        return self.drift_pages.get(after, FleetDriftAnswered(nodes=()))

    async def stragglers(self) -> FleetStragglersAnswered:
        self.asked.append("fleet.stragglers")
        return self.straggler_findings

    async def node_history(self, node_id: str) -> NodeHistoryAnswered:
        self.asked.append("node.history")
        return self.histories.get(node_id, NodeHistoryAnswered(steps=()))

    async def quarantined(self, after: str | None) -> NodeQuarantinedAnswered:
        self.asked.append("node.quarantined")
        return self.quarantined_pages.get(after, NodeQuarantinedAnswered(nodes=()))
