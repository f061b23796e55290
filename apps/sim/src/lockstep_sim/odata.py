"""Small OData helpers shared by the resource builders (DSP0266 "Resource collections")."""

from __future__ import annotations

from typing import Any

ROOT = "/redfish/v1"


def ref(path: str) -> dict[str, str]:
    return {"@odata.id": path}


def collection(path: str, odata_type: str, name: str, members: list[str]) -> dict[str, Any]:
    """A resource collection document; ``odata_type`` like ``SessionCollection``."""
    return {
        "@odata.id": path,
        "@odata.type": f"#{odata_type}.{odata_type}",
        "Name": name,
        "Members": [ref(m) for m in members],
        "Members@odata.count": len(members),
    }


def status(state: str = "Enabled", health: str = "OK") -> dict[str, str]:
    return {"State": state, "Health": health}
