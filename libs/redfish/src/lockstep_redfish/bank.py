"""Whether a BMC of a given profile can run a component's previous image again, and how (pure:
profile data only; the flip-back that acts on it is ``flip_back``, the planner's reversible ->
one-way ordering asks :func:`keeps_previous_image`).

Only a profile whose second bank is an inactive SoftwareInventory entry the device lists in
``Links.SoftwareImages`` (``inactive_inventory``: Supermicro's ``Backup_BMC``/``Backup_BIOS``)
runs the previous image again (mechanism ``inactive_image``); on every other profile going back
is a re-flash of the previous attested image (``reflash``, one-way): NVIDIA's ERoT keeps two
slots but no Redfish action runs the inactive one, and ``CommitImage``/background copy overwrite
it (``flip_back``'s docstring cites the sources).
"""

from __future__ import annotations

from lockstep_common.vocabulary import Component, RollbackMechanism
from lockstep_redfish.profile import BankKind, BmcProfile


def mechanism_for(profile: BmcProfile) -> RollbackMechanism:
    """How a flip-back runs the previous image on a BMC of ``profile``."""
    if profile.bank.kind is BankKind.INACTIVE_INVENTORY:
        return RollbackMechanism.INACTIVE_IMAGE
    return RollbackMechanism.REFLASH


def keeps_previous_image(profile: BmcProfile, component: Component | None = None) -> bool:
    """Does a BMC of ``profile`` keep ``component``'s previous image to run again (reversible),
    or is going back a re-flash (one-way)? ``None``: any component."""
    if mechanism_for(profile) is not RollbackMechanism.INACTIVE_IMAGE:
        return False
    kept = profile.bank.components
    return component is None or not kept or component in kept
