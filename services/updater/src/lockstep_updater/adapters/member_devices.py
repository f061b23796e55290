"""The PCI ids of the device each FirmwareInventory member's firmware runs on, as the BMC links
it: the member's ``RelatedItem`` (SoftwareInventory v1_1_0) naming a ``PCIeDevice`` (its
``PCIeFunctions``, each with ``VendorId`` and ``DeviceId``: PCIeFunction v1_0_0) or a
``PCIeFunction`` itself. A member whose links show no PCI ids (the GB200 capture's NICs link
nothing) is None: unknown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lockstep_redfish.errors import BmcRefused
from lockstep_redfish.session import BmcSession
from lockstep_updater.domain.targets import PciIds


def _path(link: Any) -> str | None:
    path = link.get("@odata.id") if isinstance(link, dict) else None
    return path if isinstance(path, str) and path.startswith("/") else None


def _ids(doc: dict[str, Any]) -> list[tuple[int, int]]:
    vendor, device = doc.get("VendorId"), doc.get("DeviceId")
    if not isinstance(vendor, str) or not isinstance(device, str):
        return []
    try:
        return [(int(vendor, 16), int(device, 16))]
    except ValueError:
        return []


async def member_pci_ids(
    bmc: BmcSession,
    paths: tuple[str, ...],
    related: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, PciIds | None]:
    """member path -> its device's (vendor id, device id) pairs, or None when unknown.
    ``related``: member path -> its ``RelatedItem`` paths as the same step just read them
    (preflight's ``FirmwareInventory`` read), so that those members are not read again."""
    seen: dict[str, dict[str, Any]] = {
        path: {"RelatedItem": [{"@odata.id": item} for item in items]}
        for path, items in (related or {}).items()
    }

    async def doc(path: str) -> dict[str, Any]:
        if path not in seen:
            try:
                body = (await bmc.get(path)).body
            except BmcRefused:  # a link the account may not read, or gone: it tells nothing
                body = None
            seen[path] = body if isinstance(body, dict) else {}
        return seen[path]

    out: dict[str, PciIds | None] = {}
    for member_path in paths:
        ids: list[tuple[int, int]] = []
        for link in (await doc(member_path)).get("RelatedItem") or []:
            related_path = _path(link)
            if related_path is None:
                continue
            related = await doc(related_path)
            functions = _path(related.get("PCIeFunctions"))
            if functions is None:
                ids += _ids(related)
                continue
            for function in (await doc(functions)).get("Members") or []:
                function_path = _path(function)
                if function_path is not None:
                    ids += _ids(await doc(function_path))
        out[member_path] = ids or None
    return out
