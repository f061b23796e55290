"""Helpers for sweeping the in-process simulator with the inventory service's sweeper."""

from __future__ import annotations

from collections import Counter
from contextlib import aclosing
from typing import Any

from lockstep_inventory.adapters.sweeper import SweepOptions, SweepResult, sweep
from lockstep_redfish.credentials import CredentialSource
from lockstep_redfish.session import BmcTarget
from lockstep_sim.options import DEFAULT_PASSWORD, DEFAULT_USERNAME
from lockstep_sim.simulator import Simulator


class StaticCredentials:
    """The simulator's credentials for every node, except ``wrong`` nodes."""

    def __init__(self, wrong: dict[str, str] | None = None) -> None:
        self.wrong = wrong or {}

    def get(self, node_id: str) -> tuple[str, str]:
        return DEFAULT_USERNAME, self.wrong.get(node_id, DEFAULT_PASSWORD)


def targets(sim: Simulator) -> list[BmcTarget]:
    return [BmcTarget(node.id, sim.bmc_url(node.id), allow_plain_http=True) for node in sim.fleet]


async def sweep_all(
    sim: Simulator, credentials: CredentialSource | None = None, **options: Any
) -> dict[str, SweepResult]:
    """Every result of one sweep by node id (each node exactly once); ``options`` are
    :class:`SweepOptions` fields, credentials the simulator's unless given."""
    found: dict[str, SweepResult] = {}
    stream = sweep(
        targets(sim),
        credentials=credentials or StaticCredentials(),
        options=SweepOptions(**options),
    )
    async with aclosing(stream) as results:
        async for result in results:
            assert result.node_id not in found
            found[result.node_id] = result
    assert sorted(found) == sorted(n.id for n in sim.fleet)
    return found


def versions(sim: Simulator, node_id: str) -> dict[str, str]:
    """What the simulator reports for a node: member id -> active version."""
    return {m: c.version for m, c in sim.bmc(node_id).node.components.items()}


def session_balance(sim: Simulator, node_id: str) -> tuple[int, int, list[str]]:
    """(sessions created, sessions deleted, sessions still open) from the node's ledger."""
    bmc = sim.bmc(node_id)
    created = Counter(
        e["session"]
        for e in bmc.ledger
        if e["action"] == "session_create" and e.get("status") == 201
    )
    deleted = Counter(
        e["session"]
        for e in bmc.ledger
        if e["action"] == "session_delete" and e.get("status") == 200
    )
    assert set(deleted) <= set(created)
    return sum(created.values()), sum(deleted.values()), bmc.sessions.ids()


def faults_fired(sim: Simulator, node_id: str) -> list[dict[str, Any]]:
    return [e for e in sim.bmc(node_id).ledger if e["action"] == "fault"]
