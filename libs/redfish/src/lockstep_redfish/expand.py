"""A collection's members in one request where the BMC offers it, one GET each otherwise.

DSP0266 "Query parameters": ``$expand=.($levels=1)`` answers a collection with each member's
own document in place of its link, one level deep, no links followed (``.``); a service says it
takes it in the service root's ``ProtocolFeaturesSupported.ExpandQuery`` (``NoLinks`` and
``Levels``, ServiceRoot v1_3_0; every real capture in tests/data/reference/redfish-mockups
does). The inventory's sweep reads that way (``bmc_reader``); the updater's reads of the
``FirmwareInventory`` (which profile, which versions before a write, the read back after it)
were one GET per member: 31 members on a GB200 tray, read again at every step.

What the BMC answers is not taken on trust: a member left as a bare link (a BMC that advertises
``$expand`` and does not expand, or expands only some) is read with its own GET; an answer that
cannot be a collection of those members (not a JSON object, ``Members`` not a list of objects,
a member without a path in ``@odata.id``, one member listed twice with two documents) is
:class:`~lockstep_redfish.errors.RedfishReplyError`, and the callers then read member by member,
as from a BMC that offers no ``$expand`` (one request more, never a document guessed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from lockstep_redfish.errors import RedfishReplyError
from lockstep_redfish.models import ServiceRoot, collection_members, is_reference

EXPAND = "?$expand=.($levels=1)"


def offers_expand(root: Mapping[str, Any] | None) -> bool:
    """Whether the service root advertises ``$expand=.($levels=1)``; a root that cannot be read
    as one does not."""
    if root is None:
        return False
    try:
        return ServiceRoot.model_validate(dict(root)).supports_expand_levels
    except ValidationError:
        return False


def split_members(body: Any, url: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """An (expanded) collection's answer as (member path -> its document, for the members the
    BMC expanded; the paths of those it left as links), each in the order listed.
    :class:`RedfishReplyError` naming the first thing that is wrong (module docstring)."""
    docs: dict[str, dict[str, Any]] = {}
    links: list[str] = []
    for i, member in enumerate(collection_members(body, url)):
        path = member.get("@odata.id")
        if not isinstance(path, str) or not path.startswith("/"):
            raise RedfishReplyError(url, f"Members[{i}].@odata.id", "must be a path")
        path = path.rstrip("/")
        if path in docs or path in links:
            if is_reference(member) or docs.get(path) == member:
                continue  # the same member twice, said the same way: nothing is ambiguous
            raise RedfishReplyError(url, f"Members[{i}].@odata.id", f"{path} is listed twice")
        if is_reference(member):
            links.append(path)
        else:
            docs[path] = member
    return docs, links
