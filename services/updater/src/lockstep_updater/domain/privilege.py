"""Least privilege for the BMC account the updater flashes with (reliability.md 7 H5).

Redfish privileges (DSP0266 "Privilege model", ``Privileges.PrivilegeType``): a firmware update
needs ``ConfigureComponents`` (the DSP8011 privilege registry maps ``UpdateService`` actions and
the multipart push to it), which the predefined Operator role holds (``Login``,
``ConfigureComponents``, ``ConfigureSelf``). ``ConfigureManager`` (the BMC itself: network,
certificates, its own firmware policy) and ``ConfigureUsers`` (accounts) make an account
Administrator-class: credentials that, if they leaked from the updater, would hand over the BMC.
An update never needs them, so the updater refuses such an account rather than using it
(standards.md / reliability.md 5.2: "Use a dedicated Operator-class account for flashing").
"""

from __future__ import annotations

from collections.abc import Iterable

NEEDED = "ConfigureComponents"
ADMINISTRATIVE = frozenset({"ConfigureManager", "ConfigureUsers"})


def account_refusal(roles: Iterable[str], privileges: Iterable[str]) -> str | None:
    """Why the account with ``roles`` and (all their) ``privileges`` must not flash; None when
    it is Operator-class: it can update components and can configure neither the BMC nor its
    accounts."""
    held = frozenset(privileges)
    named = ", ".join(sorted(roles)) or "no role"
    extra = sorted(held & ADMINISTRATIVE)
    if extra:
        return (
            f"the BMC account ({named}) holds {' and '.join(extra)}: Administrator-class "
            f"credentials are refused; give Lockstep an Operator-class account ({NEEDED} "
            "without ConfigureManager or ConfigureUsers)"
        )
    if NEEDED not in held:
        return f"the BMC account ({named}) lacks {NEEDED}, which a firmware update needs"
    return None
