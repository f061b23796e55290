"""Subject builders: the only place subject strings are spelled.

Subjects here are *logical* (``drift.detected.<site>.<node>``, as in design.md's catalogue).
On the wire every subject is prefixed with the deployment's namespace (``lockstep.`` by
default; see ``Namespace``), so that several Lockstep deployments, or tests, can share one NATS
server without seeing each other's events.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Annotations only: the vocabulary's pydantic types are not needed to spell a subject
    # (`lockstep fleet admit` names its subject without loading pydantic).
    from lockstep_common.vocabulary import DeviceOutcome, GateVerdict

_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def token(value: str, what: str) -> str:
    """Check that ``value`` can be one subject token, naming ``what`` it is when it cannot."""
    # fullmatch: with match, '$' would also accept a trailing newline ("node\n").
    if not _TOKEN.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} cannot be a NATS subject token: use letters, digits, '-' or '_' "
            "(no '.', '*', '>' or spaces), at most 64 characters"
        )
    return value


def bundle_submitted() -> str:
    """Bundles handed in for attestation."""
    return "bundle.submitted"


def bundle_attested() -> str:
    """Bundles that passed every check."""
    return "bundle.attested"


def bundle_rejected() -> str:
    """Bundles that failed a check."""
    return "bundle.rejected"


def intent_submitted() -> str:
    """Planners' rollout intents."""
    return "intent.submitted"


def rollout_planned(rollout_id: str) -> str:
    """A rollout's whole plan."""
    return f"rollout.planned.{token(rollout_id, 'rollout id')}"


def rollout_halted(rollout_id: str) -> str:
    """A rollout that stopped."""
    return f"rollout.halted.{token(rollout_id, 'rollout id')}"


def rollout_completed(rollout_id: str) -> str:
    """A rollout that finished."""
    return f"rollout.completed.{token(rollout_id, 'rollout id')}"


def wave_planned(rollout_id: str) -> str:
    """Waves released to the updater."""
    return f"wave.planned.{token(rollout_id, 'rollout id')}"


def wave_completed(rollout_id: str) -> str:
    """Waves the updater finished."""
    return f"wave.completed.{token(rollout_id, 'rollout id')}"


def pin_changed(site: str) -> str:
    """Pins moved within a site."""
    return f"pin.changed.{token(site, 'site')}"


def pin_changed_all() -> str:
    """Every site's pin changes (a subscription pattern)."""
    return "pin.changed.>"


def maintenance_requested() -> str:
    """Operators' maintenance windows for a pool or a site, to the planner."""
    return "maintenance.requested"


def maintenance_changed() -> str:
    """The maintenance windows the planner holds now (planner -> updater, readers)."""
    return "maintenance.changed"


def waves_all() -> str:
    """Every wave planned or completed (a subscription pattern)."""
    return "wave.>"


def rollout_ends() -> tuple[str, ...]:
    """Rollouts that halted or completed (subscription patterns)."""
    return ("rollout.halted.*", "rollout.completed.*")


def devices_all() -> str:
    """Every device step outcome (a subscription pattern)."""
    return "device.>"


def device(outcome: DeviceOutcome, rollout_id: str, node_id: str) -> str:
    """A device step outcome on one node."""
    return f"device.{outcome.value}.{token(rollout_id, 'rollout id')}.{token(node_id, 'node id')}"


def gate(verdict: GateVerdict, rollout_id: str) -> str:
    """A health-gate verdict for a rollout."""
    return f"gate.{verdict.value}.{token(rollout_id, 'rollout id')}"


def inventory_observed_all() -> str:
    """Every node's inventory reports (a subscription pattern)."""
    return "telemetry.observed.inventory.>"


def inventory_observed(site: str, node_id: str) -> str:
    """A version tuple read from one node."""
    return f"telemetry.observed.inventory.{token(site, 'site')}.{token(node_id, 'node id')}"


def health_observed_all() -> str:
    """Every node's health reports (a subscription pattern)."""
    return "telemetry.observed.health.>"


def health_observed(site: str, node_id: str) -> str:
    """A health report from one node."""
    return f"telemetry.observed.health.{token(site, 'site')}.{token(node_id, 'node id')}"


def drift_detected(site: str, node_id: str) -> str:
    """A node whose drift set changed."""
    return f"drift.detected.{token(site, 'site')}.{token(node_id, 'node id')}"


def drift_resolved(site: str, node_id: str) -> str:
    """A node that conforms again."""
    return f"drift.resolved.{token(site, 'site')}.{token(node_id, 'node id')}"


def drift_stragglers(profile: str) -> str:
    """The stragglers of one hardware profile changed."""
    return f"drift.stragglers.{token(profile, 'profile')}"


def admission_check() -> str:
    """Request/reply: may these nodes run this stack."""
    return "admission.check"


def fleet_query() -> str:
    """Request/reply: a page of registered nodes (the planner's and updater's view)."""
    return "fleet.query"


def fleet_changed() -> str:
    """Core NATS, heard by every updater process: registry entries changed (their versions)."""
    return "fleet.changed"


def node_command(site: str, node_id: str) -> str:
    """Request/reply: a command for one node's agent (the updater asks, that agent answers)."""
    return f"agent.command.{token(site, 'site')}.{token(node_id, 'node id')}"


def ops_request(identity: str, service: str, command: str) -> str:
    """Request/reply: an operator command (``fleet.list``) asked of ``service`` by ``identity``.

    The identity is a subject token so that the server, not the payload, says who asked: each
    operator identity may publish only under its own ``ops.<identity>.>`` (``bus_access``), and
    the answering service reads the asker from the subject (``lockstep_common.operator``).
    """
    tokens = [token(t, "command token") for t in command.split(".")]
    return ".".join(["ops", token(identity, "identity"), token(service, "service"), *tokens])


def ops_command_all(service: str, command: str) -> str:
    """One operator command of ``service`` from any identity (the service's subscription)."""
    tokens = [token(t, "command token") for t in command.split(".")]
    return ".".join(["ops", "*", token(service, "service"), *tokens])


def ops_requests_of(identity: str) -> str:
    """Every operator request ``identity`` may make (a permission pattern)."""
    return f"ops.{token(identity, 'identity')}.>"


def dead_letter(original: str) -> str:
    """Where a message that could not be processed is copied, under its original subject."""
    if original.startswith("dlq."):
        raise ValueError(f"refusing to dead-letter a dead letter ({original!r})")
    return f"dlq.{original}"


class Namespace:
    """Maps logical subjects and stream names to the wire for one deployment.

    Args:
        name: the deployment's namespace token, e.g. ``lockstep`` or ``staging``.
    """

    def __init__(self, name: str) -> None:
        self.name = token(name, "namespace")

    def wire(self, logical: str) -> str:
        """The subject as published on NATS."""
        return f"{self.name}.{logical}"

    def logical(self, wire: str) -> str:
        """Strip the namespace from a wire subject."""
        prefix = f"{self.name}."
        if not wire.startswith(prefix):
            raise ValueError(f"subject {wire!r} is not in namespace {self.name!r}")
        return wire[len(prefix) :]

    def stream(self, base: str) -> str:
        """A stream name, e.g. ``LOCKSTEP_DRIFT``."""
        return f"{self.name}_{base}".upper().replace("-", "_")

    def durable(self, base: str) -> str:
        """A durable consumer name, unique per namespace."""
        return f"{self.name}-{base}"
