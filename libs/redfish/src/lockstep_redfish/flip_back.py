"""The flip-back after a tripped gate: how a BMC of a given profile runs the previous image again.

What real BMCs offer, per the profile's ``[bank]``:

- ``inactive_inventory`` (Supermicro X13): the BMC keeps the image it ran before as its own
  SoftwareInventory entry (``Backup_BMC``, ``Backup_BIOS``), which the device's resource lists in
  ``Links.SoftwareImages``; the Supermicro capture's ``Managers/1`` lists ``BMC``,
  ``Backup_BMC``, ``Golden_BMC`` and ``Staging_BMC`` there, with ``Links.ActiveSoftwareImage``
  naming ``BMC`` (tests/data/reference/redfish-mockups/supermicro_hgx). DMTF made that link
  writable to choose the image a device runs (``Manager.Links.ActiveSoftwareImage`` ReadWrite
  from Manager v1_6_0, ``Bios.Links.ActiveSoftwareImage`` from Bios v1_1_0, DSP0268): the
  flip-back PATCHes it to the inactive entry that holds the previous version, then sends the
  profile's activation reset (``Manager.Reset``). Mechanism ``inactive_image``. Supermicro's
  public Redfish reference guide (its firmware inventory page) lists the same ``Backup_BMC``
  and ``Golden_BMC`` members but, as far as was found, no action of its own that runs the
  backup image: this PATCH is the standard's, not yet tried on a real X13.
- every other bank kind, and none: ``reflash``, the previous attested image written again (a
  downgrade sent as the profile's ``[downgrade] mode`` says). NVIDIA's ERoT keeps two slots
  (``Oem.Nvidia.ActiveFirmwareSlot``/``InactiveFirmwareSlot`` in the GB200 switch capture), but
  no Redfish action runs the inactive one: ``#NvidiaUpdateService.CommitImage`` copies the
  running image over it and GB200 NVL's background copy does the same after each activation
  (nvfwupd guide, "Background Copy for Targeted Components", v2.0.6:
  docs.nvidia.com/multi-node-nvlink-systems/nvfupd-guide/examples/background-copy.html), and
  NVIDIA's documented way back is a downgrade with ``ForceUpdate`` (DGX B200 firmware update
  guide, "Forcing a Firmware Downgrade": docs.nvidia.com/dgx/dgxb200-fw-update-guide/). So
  for the planner these profiles keep no previous image to run: a flip-back on them is one-way
  (``bank.keeps_previous_image``).

Nothing is written before every inactive entry needed was found (:func:`find_inactive`): a BMC
that lacks one refuses the whole flip-back, not half of it.

A ``reflash`` is the profile's own push of the previous attested image sent as the profile's
``[downgrade] mode`` says (:func:`downgrade_parameters`: forced by NVIDIA's ``ForceUpdate``, or
on the DMTF standard alone an ordinary update, which has no force flag), then the profile's own
activation; a profile whose mode is ``refused`` cannot be flipped back this way.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from lockstep_redfish.bank import keeps_previous_image, mechanism_for
from lockstep_redfish.errors import ResourceChanged, UpdateRefused, status_error
from lockstep_redfish.probe import read_facts
from lockstep_redfish.profile import BmcProfile, DowngradeMode, ResetKind
from lockstep_redfish.selection import select_profile
from lockstep_redfish.session import BmcSession
from lockstep_redfish.tasks import TaskRef
from lockstep_redfish.update import FirmwareUpdate

ROOT = "/redfish/v1/"
__all__ = [
    "InactiveImage",
    "downgrade_parameters",
    "find_inactive",
    "keeps_previous_image",
    "mechanism_for",
    "profile_of",
    "run_inactive",
]


def downgrade_parameters(profile: BmcProfile) -> dict[str, Any]:
    """The ``UpdateParameters`` a downgrade is sent with on a BMC of ``profile`` (its
    ``[downgrade] mode``): ``forced``: ``{"ForceUpdate": true}`` on NVIDIA, as nvfwupd sends it
    (DGX B200 firmware update guide, "Forcing a Firmware Downgrade"); ``as_update``: none, the
    older image is an ordinary update (DSP0268 defines no force flag; the read-back decides);
    ``refused``: :class:`UpdateRefused`."""
    mode = profile.downgrade.mode
    if mode is DowngradeMode.FORCED and profile.downgrade.force_parameter:
        return {profile.downgrade.force_parameter: True}
    if mode is DowngradeMode.AS_UPDATE:
        return {}
    raise UpdateRefused(f"profile {profile.id} allows no downgrade")


async def profile_of(bmc: BmcSession) -> BmcProfile:
    """The profile the BMC's own answers select (``selection.select_profile``), GETs only."""
    root = (await bmc.get(ROOT)).body
    facts = await read_facts(bmc, root if isinstance(root, dict) else {})
    return select_profile(facts).profile


@dataclass(frozen=True, slots=True)
class InactiveImage:
    """Where one member's previous image waits: ``image`` (a SoftwareInventory entry) listed by
    ``device`` (the Manager or Bios the member relates to)."""

    member: str
    device: str
    image: str
    version: str


async def _read(update: FirmwareUpdate, path: str) -> dict[str, Any]:
    reply = await update.bmc.request("GET", path)
    if reply.status != 200:
        raise status_error("GET", update.bmc.url(path), reply.status)
    return reply.body if isinstance(reply.body, dict) else {}


def _links(doc: Any) -> dict[str, Any]:
    links = doc.get("Links") if isinstance(doc, dict) else None
    return links if isinstance(links, dict) else {}


def _paths(value: Any) -> list[str]:
    items = value if isinstance(value, list) else []
    return [i["@odata.id"] for i in items if isinstance(i, dict) and "@odata.id" in i]


async def find_inactive(
    update: FirmwareUpdate, profile: BmcProfile, member: str, previous: str
) -> InactiveImage:
    """The inactive entry holding ``previous`` for ``member``: among ``Links.SoftwareImages``
    of each device in the member's ``RelatedItem``, an entry the profile names as inactive
    (``bank.inactive_members``) that reports that version. :class:`UpdateRefused` when none."""
    doc = await _read(update, member)
    for device in _paths(doc.get("RelatedItem")):
        for image in _paths(_links(await _read(update, device)).get("SoftwareImages")):
            image_id = image.rstrip("/").rsplit("/", 1)[-1]
            if not any(fnmatchcase(image_id, g) for g in profile.bank.inactive_members):
                continue
            if (await _read(update, image)).get("Version") == previous:
                return InactiveImage(member, device, image, previous)
    raise UpdateRefused(
        f"{member}: no inactive image at {previous} in its device's SoftwareImages "
        f"(profile {profile.id}); nothing was changed"
    )


async def run_inactive(
    update: FirmwareUpdate, profile: BmcProfile, members: dict[str, str]
) -> list[TaskRef]:
    """Run each member's previous image (``members``: path -> previous version): find every
    inactive entry first, then PATCH each device's ``Links.ActiveSoftwareImage`` to it (under
    ``If-Match``; a device changed meanwhile is re-read once), then the profile's activation
    reset. Returns the reset's task, if it answered with one.

    Safe to call again after an interruption: it reads before it writes. A member already
    running its previous version needs nothing; a device whose ``ActiveSoftwareImage`` already
    names the inactive entry is not patched again (only the reset is left to send); nothing
    left to do sends nothing."""
    pending = {
        path: version
        for path, version in members.items()
        if (await _read(update, path)).get("Version") != version
    }
    found = [await find_inactive(update, profile, path, v) for path, v in pending.items()]
    for entry in found:
        active = _links(await _read(update, entry.device)).get("ActiveSoftwareImage")
        if isinstance(active, dict) and active.get("@odata.id") == entry.image:
            continue  # chosen before an interruption: only the reset is left
        change = {"Links": {"ActiveSoftwareImage": {"@odata.id": entry.image}}}
        try:
            await update.patch(entry.device, change)
        except ResourceChanged:  # DSP0266 "ETags": read again and decide again, once
            await update.patch(entry.device, change)
    return await _activation_reset(update, profile) if found else []


async def _activation_reset(update: FirmwareUpdate, profile: BmcProfile) -> list[TaskRef]:
    act = profile.activation
    if act.reset is ResetKind.NONE or act.resource is None or act.reset_type is None:
        return []
    resource = act.resource
    if "*" in resource:  # a glob over the collection it names (Systems/*)
        parent = resource.rsplit("/", 1)[0]
        matches = [p for p in await update.collection(parent) if fnmatchcase(p, resource)]
        if not matches:
            raise UpdateRefused(f"no {resource} to reset (profile {profile.id})")
        resource = matches[0]
    ref = await update.reset(resource, act.reset_type)
    return [] if ref is None else [ref]
