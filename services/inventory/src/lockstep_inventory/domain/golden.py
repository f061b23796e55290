"""A golden stack taken from a known-good node (issue 14, item 5: ``fleet pin --from-node``).

An operator who has one node running exactly what the fleet should run pins the fleet to it
instead of typing versions: the node's latest reports become ``{component: version}`` for its
profile (members running different images by design pinned as their version set, as
``pins.stack_of`` does), but only if the reports can be trusted to be the node's stack (the BMC
read, nothing breaking a critical compatibility rule). Pure: the rules and ``today`` come in.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from lockstep_common.compatibility.rules import check_compatibility
from lockstep_common.compatibility.table import CompatibilityRules
from lockstep_common.vocabulary import Component, ObservationSource, Severity
from lockstep_inventory.domain.members import version_set
from lockstep_inventory.domain.observation import Observation, merge


class NotGolden(ValueError):
    """The node's reports cannot serve as a golden stack; the message says why."""


def stack_of_node(
    node_id: str,
    profile: str,
    observations: Mapping[ObservationSource, Observation],
    *,
    rules: CompatibilityRules,
    today: dt.date,
) -> dict[Component, str]:
    """What the node runs, as a stack for its profile.

    Raises:
        NotGolden: the BMC was never read or is unreadable now (its versions are not known to
            be current), or the node breaks a critical compatibility rule (a pin of it would
            make every other node of the profile drift towards a broken stack).
    """
    redfish = observations.get(ObservationSource.REDFISH)
    if redfish is None or not (redfish.components or redfish.conflicts):
        raise NotGolden(f"node {node_id}: its BMC was never read (run `lockstep fleet sweep`)")
    if not redfish.readable:
        raise NotGolden(
            f"node {node_id}: its BMC is unreadable ({redfish.error or 'no reason given'}); "
            "its last versions may be stale"
        )
    merged = merge(observations)
    broken = [
        i.detail
        for i in check_compatibility(
            profile,
            merged.actual,
            today=today,
            firmware_dirs=merged.firmware_dirs,
            loaded_module=merged.loaded_module,
            rules=rules,
        )
        if i.severity is Severity.CRITICAL
    ]
    if broken:
        raise NotGolden(f"node {node_id} is not known-good: {'; '.join(broken)}")
    stack = dict(merged.actual)
    stack.update((c, version_set(by_member)) for c, by_member in merged.conflicts.items())
    return dict(sorted(stack.items()))
