"""The healthgate's operator commands (``lockstep gate show``, ``lockstep fleet stragglers``),
answered over the bus by ``lockstep_common.operator.OperatorResponder`` (``app.py`` adds them
to the service): the CLI reads none of the healthgate's tables. Both only read.
"""

from __future__ import annotations

from typing import Any

from lockstep_common.db import Conn
from lockstep_common.events.v1 import (
    FleetStragglersAnswered,
    FleetStragglersRequested,
    GateShowAnswered,
    GateShowRequested,
    GateVerdictRecord,
    StragglersFlagged,
)
from lockstep_common.operator import Asker, Command
from lockstep_healthgate.adapters.pg_store import read_stragglers, read_verdicts


async def gate_show(conn: Conn, request: GateShowRequested, asker: Asker) -> GateShowAnswered:
    """A rollout's persisted verdicts with their evidence, by wave."""
    del asker
    records = await read_verdicts(conn, request.rollout_id, request.wave)
    return GateShowAnswered(
        verdicts=tuple(
            GateVerdictRecord(
                rollout_id=v.rollout_id,
                wave=v.wave,
                verdict=v.decision.verdict,
                kind=v.kind,
                reason=v.decision.reason,
                window_start=v.window_start,
                window_end=v.window_end,
                policy_digest=v.policy_digest,
                event_id=v.event_id,
                decision=v.decision.model_dump(mode="json"),
            )
            for v in records
        )
    )


async def fleet_stragglers(
    conn: Conn, request: FleetStragglersRequested, asker: Asker
) -> FleetStragglersAnswered:
    """Each profile's last straggler finding."""
    del request, asker
    findings = await read_stragglers(conn)
    return FleetStragglersAnswered(
        findings=tuple(StragglersFlagged.model_validate(f, strict=False) for f in findings)
    )


COMMANDS: tuple[Command[Any], ...] = (
    Command("gate.show", GateShowRequested, GateShowAnswered, gate_show),
    Command(
        "fleet.stragglers", FleetStragglersRequested, FleetStragglersAnswered, fleet_stragglers
    ),
)
