"""Redfish ``FirmwareInventory`` members -> Lockstep components, through the BMC's profile.

Which member holds which component is data, and the same data the updater flashes by: the
``[[members]]`` rows of the BMC profile (``lockstep_redfish/profiles/*.toml``) chosen for the
BMC the way the updater's preflight chooses it (``lockstep_redfish.selection.select_profile``
over what the service root, ``UpdateService``, ``Managers`` and ``FirmwareInventory`` say, or a
profile named for the node: ``bmc_profiles``). The first row any hint of which holds decides
(member id glob, ``SoftwareId``, ``RelatedItem`` glob, ``Oem`` value). A row maps either to a
:class:`Component` or, explicitly, to none with a label ("not a Lockstep component": the member
is kept raw, its version still travels in ``InventoryObserved.members``). A member no row knows
is *unknown*: kept and returned, never dropped. Nothing here names a vendor's member.

Where members come from, and so which profile reads them: only the inventory's own sweep reads
``FirmwareInventory`` (a Redfish report on the bus is dead-lettered; agents report in-band
components, never members; a fleet import registers nodes, not what they run), and its reader
chooses the profile with the BMC session open (``adapters.bmc_reader``). A report that names
no profile is read by the shipped profiles in order of priority, as the updater reads a member
it chose no profile for. What was swept is not mapped again later: ``fleet.swept`` and pins
made from a node use the components and conflicts its report stored.

Decisions (rows of the profiles, tested in ``tests/unit/inventory/test_members.py`` on the
real captures and on every simulator dialect):

- ``HGX_FW_BMC_0`` is ``bmc`` (the HGX HMC's BMC, flashed as the BMC); the AMI host BMC
  ``HostBMC_0`` and host ERoTs ``EROT_BIOS_0``/``EROT_BMC_0`` are OEM firmware outside the
  NVIDIA bundle: raw ``host_bmc``/``host_erot`` (``nvidia-hgx``, ``lockstep-sim``).
- A member showing another bank's image (Supermicro's ``Backup_*``/``Golden_*``: the inactive
  or golden image; ``Staging_*``/``Capsule_*``: an image waiting to be applied; each with its
  running twin's RelatedItem) is not what runs: raw ``backup``/``staging``, rows placed before
  any row its twin's hints would match, so a backup bank holding the previous image is no
  conflict (``supermicro-x13``).
- InfoROM (``*_InfoROM_*``) is a configuration store versioned with the board: raw ``inforom``.
- Grace CPU firmware, the HGX FPGA, ``HGX_FW_CPLD_*`` (the simulator's separate ``hgx_cpld``
  kind), PCIe retimers and PCIe switches have no word in the vocabulary: raw, so the planner
  cannot pin them yet (reported as missing vocabulary).
- Several members of one component (4 GPUs, 4 CPLDs) must agree; otherwise the component is
  reported as a conflict (:class:`ComponentVersions`), never silently resolved.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep_common.vocabulary import Component
from lockstep_redfish.profile import BmcProfile
from lockstep_redfish.selection import MemberFacts, map_member_shipped
from lockstep_redfish.selection import map_member as profile_map


class MemberStatus(enum.StrEnum):
    """How one member was classified."""

    MAPPED = "mapped"
    NOT_A_COMPONENT = "not_a_component"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Member:
    """One ``SoftwareInventory`` member as read from a BMC, with the hints the profile's rows
    read (``SoftwareId``, ``RelatedItem`` paths, ``Oem``)."""

    id: str
    version: str
    name: str | None = None
    software_id: str | None = None
    related: tuple[str, ...] = ()
    oem: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_redfish(cls, doc: Mapping[str, Any]) -> Member:
        """Build from a SoftwareInventory JSON document; ``Id`` and ``Version`` are required."""
        ident, version = doc.get("Id"), doc.get("Version")
        if not isinstance(ident, str) or not ident:
            raise ValueError(f"SoftwareInventory without a string Id: {doc.get('@odata.id')!r}")
        if not isinstance(version, str) or not version:
            raise ValueError(f"SoftwareInventory {ident!r} has no string Version")
        facts = MemberFacts.from_doc(doc)
        name = doc.get("Name")
        return cls(
            id=ident,
            version=version,
            name=name if isinstance(name, str) else None,
            software_id=facts.software_id,
            related=facts.related,
            oem=facts.oem,
        )

    @property
    def facts(self) -> MemberFacts:
        """What the profile's rows read of this member."""
        return MemberFacts(self.id, self.software_id, self.related, self.oem, self.version)


@dataclass(frozen=True, slots=True)
class MemberMapping:
    """Where one member landed; ``label`` is the row's label (``None`` when unknown)."""

    member_id: str
    component: Component | None
    label: str | None

    @property
    def status(self) -> MemberStatus:
        """mapped, not_a_component or unknown."""
        if self.component is not None:
            return MemberStatus.MAPPED
        return MemberStatus.UNKNOWN if self.label is None else MemberStatus.NOT_A_COMPONENT


def map_member(profile: BmcProfile | None, member: Member | str) -> MemberMapping:
    """``member`` (or a bare member id) through ``profile``'s rows: the first that holds. With
    no profile (a report whose BMC's profile is not known), through the shipped profiles in
    order of their ``priority``, the first that knows the member deciding: how the updater
    reads a member it has chosen no profile for (``targets.component_of``)."""
    facts = MemberFacts(member) if isinstance(member, str) else member.facts
    found = profile_map(profile, facts) if profile is not None else map_member_shipped(facts)
    return MemberMapping(found.member_id, found.component, found.label)


@dataclass(frozen=True, slots=True)
class ComponentVersions:
    """A node's component versions from its members.

    ``versions`` holds the components whose members all agree; ``conflicts`` the components whose
    members disagree (member id -> version); ``raw`` the members that are explicitly not Lockstep
    components; ``unmapped`` the members no row knows. Every input member is in exactly one of
    ``conflicts``/``raw``/``unmapped`` or contributes to ``versions``.
    """

    versions: dict[Component, str] = field(default_factory=dict)
    conflicts: dict[Component, dict[str, str]] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)
    unmapped: dict[str, str] = field(default_factory=dict)
    mappings: dict[str, MemberMapping] = field(default_factory=dict)


def version_set(by_member: Mapping[str, str]) -> str:
    """The distinct versions members of one component carry, sorted and joined with ``|``:
    how such a set is pinned (``pins.stack_of``), compared and shown."""
    return "|".join(sorted(set(by_member.values())))


def versions_of(
    members: Iterable[Member] | Mapping[str, str], profile: BmcProfile | None
) -> ComponentVersions:
    """Group members by component under ``profile`` (:func:`map_member`); one common version
    per component or an explicit conflict (a mapping is member id -> version, ids the only
    hint)."""
    items = [Member(k, v) for k, v in members.items()] if isinstance(members, Mapping) else members
    grouped: dict[Component, dict[str, str]] = {}
    result = ComponentVersions()
    for member in items:
        mapping = map_member(profile, member)
        result.mappings[member.id] = mapping
        if mapping.component is not None:
            grouped.setdefault(mapping.component, {})[member.id] = member.version
        elif mapping.label is not None:
            result.raw[member.id] = member.version
        else:
            result.unmapped[member.id] = member.version
    for component, by_member in grouped.items():
        distinct = set(by_member.values())
        if len(distinct) == 1:
            result.versions[component] = distinct.pop()
        else:
            result.conflicts[component] = dict(sorted(by_member.items()))
    return result
