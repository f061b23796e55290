"""AccountService (AccountService v1_15_0), ManagerAccount v1_12_0 and Role v1_3_2; the
Administrator account whose credentials the simulator is started with, and the account Lockstep
flashes with (same password) holding what the dialect's update calls need (DSP8011 privilege
registry): the predefined Operator role (Login, ConfigureComponents: UpdateService actions,
ComputerSystem.Reset, Chassis.Reset), or where the dialect activates with ``Manager.Reset``
(Supermicro) the custom role ``FirmwareOperator``, an Operator that also holds ConfigureManager
and still not ConfigureUsers (Role v1_3_2 ``IsPredefined`` false)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from lockstep_sim.odata import ROOT, collection, ref, status

ACCOUNTS = f"{ROOT}/AccountService/Accounts"
ROLES = f"{ROOT}/AccountService/Roles"
_PRIVILEGES = {
    "Administrator": [
        "Login",
        "ConfigureManager",
        "ConfigureUsers",
        "ConfigureSelf",
        "ConfigureComponents",
    ],
    "Operator": ["Login", "ConfigureSelf", "ConfigureComponents"],
    "ReadOnly": ["Login", "ConfigureSelf"],
    "FirmwareOperator": ["Login", "ConfigureSelf", "ConfigureComponents", "ConfigureManager"],
}
PREDEFINED = frozenset({"Administrator", "Operator", "ReadOnly"})
ROLE_IDS = tuple(_PRIVILEGES)


PRIVILEGES = _PRIVILEGES


@dataclass(slots=True)
class Account:
    id: str
    username: str
    password: str
    role: str = "Administrator"
    enabled: bool = True

    def can(self, privilege: str) -> bool:
        return privilege in _PRIVILEGES[self.role]


@dataclass(slots=True)
class AccountStore:
    """A BMC's accounts by id; "1" is the administrator the simulator starts with."""

    by_id: dict[str, Account] = field(default_factory=dict)
    counter: int = 0

    def add(self, username: str, password: str, role: str = "Administrator") -> Account:
        self.counter += 1
        account = Account(str(self.counter), username, password, role)
        self.by_id[account.id] = account
        return account

    def check(self, username: str, password: str) -> Account | None:
        """The enabled account with these credentials (compared in constant time)."""
        for account in self.by_id.values():
            if account.username == username and account.enabled:
                ok = secrets.compare_digest(account.password.encode(), password.encode())
                return account if ok else None
        return None

    def by_name(self, username: str) -> Account | None:
        return next((a for a in self.by_id.values() if a.username == username), None)


def account_service_doc() -> dict[str, Any]:
    return {
        "@odata.id": f"{ROOT}/AccountService",
        "@odata.type": "#AccountService.v1_15_0.AccountService",
        "Id": "AccountService",
        "Name": "Account Service",
        "ServiceEnabled": True,
        "Status": status(),
        "MinPasswordLength": 8,
        "MaxPasswordLength": 64,
        "AccountLockoutThreshold": 0,
        "AuthFailureLoggingThreshold": 3,
        "Accounts": ref(ACCOUNTS),
        "Roles": ref(ROLES),
    }


def accounts_doc(store: AccountStore) -> dict[str, Any]:
    ids = sorted(store.by_id, key=int)
    return collection(
        ACCOUNTS, "ManagerAccountCollection", "Accounts", [f"{ACCOUNTS}/{i}" for i in ids]
    )


def account_doc(account: Account) -> dict[str, Any]:
    return {
        "@odata.id": f"{ACCOUNTS}/{account.id}",
        "@odata.type": "#ManagerAccount.v1_12_0.ManagerAccount",
        "Id": account.id,
        "Name": "User Account",
        "UserName": account.username,
        "Password": None,  # DSP0268 ManagerAccount: Password shall be null in responses
        "RoleId": account.role,
        "Enabled": account.enabled,
        "Locked": False,
        "AccountTypes": ["Redfish"],
        "Links": {"Role": ref(f"{ROLES}/{account.role}")},
    }


def roles_doc() -> dict[str, Any]:
    return collection(ROLES, "RoleCollection", "Roles", [f"{ROLES}/{r}" for r in ROLE_IDS])


def role_doc(role_id: str) -> dict[str, Any]:
    return {
        "@odata.id": f"{ROLES}/{role_id}",
        "@odata.type": "#Role.v1_3_2.Role",
        "Id": role_id,
        "Name": f"{role_id} Role",
        "RoleId": role_id,
        "IsPredefined": role_id in PREDEFINED,
        "AssignedPrivileges": _PRIVILEGES[role_id],
    }
