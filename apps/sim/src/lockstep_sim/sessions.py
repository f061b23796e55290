"""SessionService (SessionService v1_1_9, Session v1_7_0) and authentication (DSP0266 section
"Security details": Basic authentication and session tokens in ``X-Auth-Token``)."""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass, field
from typing import Any

from lockstep_sim.odata import ROOT, collection, ref, status

SESSIONS = f"{ROOT}/SessionService/Sessions"


@dataclass(slots=True)
class Session:
    id: str
    token: str
    username: str
    role: str = "Administrator"


@dataclass(slots=True)
class SessionStore:
    """A BMC's open sessions, by token."""

    by_token: dict[str, Session] = field(default_factory=dict)
    counter: int = 0

    def create(self, username: str, role: str = "Administrator") -> Session:
        self.counter += 1
        session = Session(str(self.counter), secrets.token_hex(16), username, role)
        self.by_token[session.token] = session
        return session

    def get(self, session_id: str) -> Session | None:
        return next((s for s in self.by_token.values() if s.id == session_id), None)

    def delete(self, session_id: str) -> bool:
        session = self.get(session_id)
        if session is None:
            return False
        del self.by_token[session.token]
        return True

    def ids(self) -> list[str]:
        return sorted((s.id for s in self.by_token.values()), key=int)


def basic_credentials(header: str) -> tuple[str, str] | None:
    """(username, password) from an ``Authorization: Basic`` header, or None."""
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


def session_service_doc(timeout: int = 1800) -> dict[str, Any]:
    return {
        "@odata.id": f"{ROOT}/SessionService",
        "@odata.type": "#SessionService.v1_1_9.SessionService",
        "Id": "SessionService",
        "Name": "Session Service",
        "ServiceEnabled": True,
        "SessionTimeout": timeout,
        "Status": status(),
        "Sessions": ref(SESSIONS),
    }


def sessions_doc(store: SessionStore) -> dict[str, Any]:
    return collection(
        SESSIONS,
        "SessionCollection",
        "Session Collection",
        [f"{SESSIONS}/{i}" for i in store.ids()],
    )


def session_doc(session: Session) -> dict[str, Any]:
    return {
        "@odata.id": f"{SESSIONS}/{session.id}",
        "@odata.type": "#Session.v1_7_0.Session",
        "Id": session.id,
        "Name": "User Session",
        "UserName": session.username,
        # Session v1_7_0 Roles: what a client reads to learn its own privileges after login.
        "Roles": [session.role],
    }
