"""Least privilege per BMC profile: which Redfish privileges the calls a profile makes need, and
why an account is refused (pure; ``accounts.session_roles`` reads what an account holds).

The needs come from the Redfish privilege registry (DSP8011, ``Redfish_1.x.x_PrivilegeRegistry``),
not from a table of vendors: every read and the session login need ``Login``; a POST to
``UpdateService`` or one of its actions (the multipart or HTTP push, ``SimpleUpdate``,
``Activate``, an OEM action such as NVIDIA's ``CommitImage``) and the PATCH of its
``HttpPushUriTargets`` need ``ConfigureComponents``, as do ``ComputerSystem.Reset``,
``Chassis.Reset`` and the PATCH of a ``Bios``; ``Manager.Reset`` and the PATCH of a ``Manager``
(its ``Links.ActiveSoftwareImage``, the Supermicro flip-back) need ``ConfigureManager``. So the
set follows the profile: its push, its activation reset and, where its second bank is chosen by
a PATCH of the device (``inactive_inventory``), that device (the BMC's own image: a Manager).

Every identity holds only what it needs (design.md, reliability.md 7 H5): ``ConfigureUsers``
(accounts: whoever holds it can make an Administrator) is never needed and is refused;
``ConfigureManager`` is refused unless the profile's own calls need it. Refused, not warned:
the updater keeps the credentials for as long as it runs, and ``lockstep bmc probe`` says what
the updater would refuse, so both refuse the same accounts with the same line.
"""

from __future__ import annotations

from collections.abc import Iterable

from lockstep_common.vocabulary import Component
from lockstep_redfish.profile import BankKind, BmcProfile, ResetKind

LOGIN = "Login"
CONFIGURE_COMPONENTS = "ConfigureComponents"
CONFIGURE_MANAGER = "ConfigureManager"
CONFIGURE_USERS = "ConfigureUsers"
# Privileges that make an account Administrator-class (DSP0266 "Privilege model"): held beyond
# what the profile's calls need, the account is refused.
ADMINISTRATIVE = frozenset({CONFIGURE_MANAGER, CONFIGURE_USERS})

_RESET = {
    ResetKind.SYSTEM: ("ComputerSystem.Reset", CONFIGURE_COMPONENTS),
    ResetKind.CHASSIS: ("Chassis.Reset", CONFIGURE_COMPONENTS),
    ResetKind.MANAGER: ("Manager.Reset", CONFIGURE_MANAGER),
}


def needed_privileges(profile: BmcProfile) -> dict[str, tuple[str, ...]]:
    """Each privilege the calls of ``profile`` need (DSP8011), with the calls that need it."""
    calls: list[tuple[str, str]] = [(LOGIN, "the login and every read")]
    calls.append((profile.privilege, f"the UpdateService push ({', '.join(profile.push.methods)})"))
    act = profile.activation
    if act.stage_and_activate:
        calls.append((CONFIGURE_COMPONENTS, "UpdateService.Activate"))
    if act.reset is not ResetKind.NONE:
        action, privilege = _RESET[act.reset]
        calls.append((privilege, f"{action} of {act.resource}"))
    bank = profile.bank
    if bank.kind is BankKind.COMMIT_IMAGE and bank.action:
        calls.append((CONFIGURE_COMPONENTS, f"UpdateService {bank.action}"))
    if bank.kind is BankKind.INACTIVE_INVENTORY:
        # The flip-back PATCHes Links.ActiveSoftwareImage of the member's device: a Manager for
        # the BMC's own image (DSP0268: a Manager is the BMC), a Bios or a system otherwise.
        banked = bank.components or [Component.BMC]
        if Component.BMC in banked:
            calls.append((CONFIGURE_MANAGER, "the flip-back's PATCH of a Manager's image link"))
        if any(c is not Component.BMC for c in banked):
            calls.append((CONFIGURE_COMPONENTS, "the flip-back's PATCH of a device's image link"))
    needed: dict[str, list[str]] = {}
    for privilege, call in calls:
        needed.setdefault(privilege, []).append(call)
    return {privilege: tuple(why) for privilege, why in needed.items()}


def account_refusal(
    profile: BmcProfile, privileges: Iterable[str] | None, roles: Iterable[str] = ()
) -> str | None:
    """Why the account (with ``roles``, holding ``privileges``; None: the BMC does not say)
    must not flash a BMC of ``profile``, in one line; None when it holds what the profile's
    calls need and no administrative privilege they do not (module docstring)."""
    needed = needed_privileges(profile)
    wanted = ", ".join(sorted(needed))
    named = ", ".join(sorted(roles))
    account = f"the account ({named})" if named else "the account"
    if privileges is None:
        return f"{account}'s privileges cannot be read; the profile's calls need {wanted}"
    held = frozenset(privileges)
    missing = {p: why for p, why in needed.items() if p not in held}
    if missing:
        lacks = "; ".join(f"{p} for {', '.join(why)}" for p, why in missing.items())
        holds = ", ".join(sorted(held)) or "none"
        return (
            f"{account} lacks what the profile's calls need (DSP8011: {lacks}; it holds: {holds})"
        )
    extra = sorted((held & ADMINISTRATIVE) - needed.keys())
    if extra:
        return (
            f"{account} holds {' and '.join(extra)}, more than the profile's calls need: "
            f"Administrator-class credentials are refused; use an account whose role holds "
            f"only {wanted}"
        )
    return None
