"""BMC credentials of the nodes the updater touches, resolved locally and just in time from
each node's registry reference (``env:PREFIX`` or ``file:/path``, from ``fleet.query``): the
inventory never sends a secret, and nothing here keeps one (design.md non-negotiable 8)."""

from __future__ import annotations

from collections.abc import Mapping

from lockstep_common.events.v1 import FleetNode
from lockstep_redfish.credentials import RegistryCredentials


class FleetCredentials:
    """A ``CredentialSource`` over the references last read for each node."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        self._references: dict[str, str] = {}

    def learn(self, node: FleetNode) -> None:
        """Remember the node's reference as just read from the inventory."""
        self._references[node.node_id] = node.credentials

    def get(self, node_id: str) -> tuple[str, str]:
        # A fresh resolver per call: a rotated file or variable is read on the next login.
        return RegistryCredentials(self._references, self._environ).get(node_id)
