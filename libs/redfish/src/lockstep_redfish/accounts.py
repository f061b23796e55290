"""Which Redfish roles, and so which privileges, an account logged in to a BMC holds: what the
updater's preflight and ``lockstep bmc probe`` both read (one reading, not two).

Read right after login: the ``Session`` resource's ``Roles`` (Session v1_7_0); a BMC whose
sessions name no roles, or a login by HTTP Basic (no session resource), is asked through
AccountService: the ``ManagerAccount`` whose ``UserName`` is the session's, or the given user's
(its ``RoleId``). A role's privileges are its ``Role`` resource's
``AssignedPrivileges`` and ``OemPrivileges``, at ``<AccountService.Roles>/<RoleId>`` (the Role
schema's URI pattern ``/redfish/v1/AccountService/Roles/{RoleId}``; ``RoleId`` equals ``Id``).
"""

from __future__ import annotations

from typing import Any

from lockstep_common.errors import PermanentError
from lockstep_redfish.errors import BmcRefused
from lockstep_redfish.session import BmcSession

ACCOUNT_SERVICE = "/redfish/v1/AccountService"


class AccountUnknown(PermanentError):
    """The BMC does not say what the session's account may do: it is not used to flash."""


def _link(doc: dict[str, Any], name: str) -> str:
    target = doc.get(name)
    path = target.get("@odata.id") if isinstance(target, dict) else None
    if not isinstance(path, str):
        raise AccountUnknown(f"the BMC's AccountService has no {name} link")
    return path


async def _doc(bmc: BmcSession, path: str) -> dict[str, Any]:
    body = (await bmc.get(path)).body
    if not isinstance(body, dict):
        raise AccountUnknown(f"{path} is not a Redfish resource")
    return body


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


async def session_roles(
    bmc: BmcSession, username: str | None = None
) -> tuple[tuple[str, ...], frozenset[str]]:
    """(role ids, every privilege they grant) of the account ``bmc`` is logged in with (or of
    ``username``, for a login without a session resource); :class:`AccountUnknown` when the
    BMC does not tell."""
    if bmc.uri is None and username is None:
        raise AccountUnknown("the BMC named no session resource to read the account's role from")
    session = await _doc(bmc, bmc.uri) if bmc.uri is not None else {}
    service = await _doc(bmc, ACCOUNT_SERVICE)
    roles = _strings(session.get("Roles"))
    if not roles:
        user = session.get("UserName") or username
        accounts = await _doc(bmc, _link(service, "Accounts"))
        for member in accounts.get("Members", []):
            path = member.get("@odata.id") if isinstance(member, dict) else None
            if isinstance(path, str):
                try:
                    account = await _doc(bmc, path)
                except BmcRefused:
                    # DSP8011: reading another's account needs ConfigureUsers, which an
                    # Operator lacks (ConfigureSelf reads its own): not ours, go on.
                    continue
                if account.get("UserName") == user and isinstance(account.get("RoleId"), str):
                    roles = [account["RoleId"]]
                    break
    if not roles:
        raise AccountUnknown("the BMC names no role for the session's account")
    privileges: set[str] = set()
    base = _link(service, "Roles").rstrip("/")
    for role in roles:
        doc = await _doc(bmc, f"{base}/{role}")
        privileges.update(_strings(doc.get("AssignedPrivileges")))
        privileges.update(_strings(doc.get("OemPrivileges")))
    return tuple(roles), frozenset(privileges)
