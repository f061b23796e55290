"""Redfish ``FirmwareInventory`` members -> Lockstep components.

The member ids follow the NVIDIA captures in ``reference/redfish-mockups`` (GB200 NVL
``nvidia_gb200``, HGX H100 on AMI ``nvidia_viking``, GB switch tray ``nvidia_gbswitch``) and the
simulator's profiles (``lockstep_sim.profiles``). The mapping is an ordered data table: the first
rule whose regex matches the member id wins. A rule maps either to a :class:`Component` or,
explicitly, to ``None`` with a label ("not a Lockstep component": the member is kept raw, its
version still travels in ``InventoryObserved.members``). A member no rule matches is *unknown*:
kept and returned, never dropped.

Decisions (documented here, tested in ``tests/unit/inventory/test_members.py``):

- ``HGX_FW_BMC_0`` is ``bmc`` (the simulator's hgx-h100 profile flashes it as the BMC); the AMI
  host BMC ``HostBMC_0`` and host ERoTs ``EROT_BIOS_0``/``EROT_BMC_0`` are OEM firmware outside
  the NVIDIA bundle: raw ``host_bmc``/``host_erot``.
- A member showing another bank's image (the Supermicro capture's ``Backup_BMC``,
  ``Golden_BMC``, ``Staging_BIOS``: the inactive, golden or staged image, Supermicro's
  SoftwareId its running twin's) is not what runs: raw ``other_bank``, checked before any
  SoftwareId fallback, so that a backup bank holding the previous image is no conflict.
- InfoROM (``*_InfoROM_*``) is a configuration store versioned with the board: raw ``inforom``.
- Grace CPU firmware (``*_FW_CPU_*``), the HGX FPGA, ``HGX_FW_CPLD_*`` (the simulator's separate
  ``hgx_cpld`` kind), PCIe retimers and PCIe switches have no word in the vocabulary: raw, so the
  planner cannot pin them yet (reported as missing vocabulary).
- Several members of one component (4 GPUs, 4 CPLDs) must agree; otherwise the component is
  reported as a conflict (:class:`ComponentVersions`), never silently resolved.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from lockstep_common.vocabulary import Component


class MemberStatus(enum.StrEnum):
    """How one member was classified."""

    MAPPED = "mapped"
    NOT_A_COMPONENT = "not_a_component"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the mapping table: member-id regex -> component (``None``: kept raw)."""

    pattern: re.Pattern[str]
    component: Component | None
    label: str


def _rule(regex: str, component: Component | None, label: str) -> Rule:
    return Rule(re.compile(regex), component, label)


# Ordered: the first match wins, so the specific rows (host-side OEM parts, InfoROM) come before
# the generic ones they would otherwise fall into.
RULES: tuple[Rule, ...] = (
    _rule(r"^(Backup|Golden|Staging)_\w+$", None, "other_bank"),  # Supermicro's other banks
    _rule(r"^(HGX|MGX)_InfoROM_\w+$", None, "inforom"),
    _rule(r"^EROT_\w+$", None, "host_erot"),  # AMI host-side ERoTs (viking)
    _rule(r"^HostBMC_\d+$", None, "host_bmc"),  # AMI host BMC (viking)
    _rule(r"^((HGX|MGX)_)?FW_ERoT_\w+$", Component.EROT, "erot"),
    _rule(r"^((HGX|MGX)_)?FW_BMC_\d+$", Component.BMC, "bmc"),
    _rule(r"^HGX_FW_GPU_(SXM_)?\d+$", Component.GPU_VBIOS, "gpu_vbios"),
    _rule(r"^(HGX|MGX)_FW_NVSwitch_\d+$", Component.NVSWITCH, "nvswitch"),
    _rule(r"^HGX_FW_CPLD_\d+$", None, "hgx_cpld"),
    _rule(r"^(FW_)?CPLD(MB|MID)?_\d+$", Component.CPLD, "cpld"),
    _rule(r"^(HGX|MGX)_FW_CPU_\d+$", None, "cpu"),
    _rule(r"^(HGX|MGX)_FW_FPGA_\d+$", None, "fpga"),
    _rule(r"^(HGX_FW_)?PCIeRetimer_\d+$", None, "pcie_retimer"),
    _rule(r"^(HGX_FW_|HGX_)?PCIeSwitch(Config)?_\d+$", None, "pcie_switch"),
    _rule(r"^(CX7|NIC)_\d+$", Component.NIC, "nic"),
    _rule(r"^(UEFI|HostBIOS_\d+)$", Component.BIOS, "bios"),
    _rule(r"^PSU_\d+$", Component.PSU, "psu"),
    _rule(r"^BBU_\d+$", Component.BBU, "bbu"),
)

# Fallback for ids no rule knows: the NVIDIA ``SoftwareId`` seen in the GB200 captures.
SOFTWARE_IDS: Mapping[str, tuple[Component, str]] = {
    "0xC000": (Component.GPU_VBIOS, "gpu_vbios"),
    "0x0010": (Component.BMC, "bmc"),
    "0xFF00": (Component.EROT, "erot"),
    "0x00CF": (Component.NVSWITCH, "nvswitch"),
    "UEFI": (Component.BIOS, "bios"),
}


@dataclass(frozen=True, slots=True)
class Member:
    """One ``SoftwareInventory`` member as read from a BMC."""

    id: str
    version: str
    name: str | None = None
    software_id: str | None = None

    @classmethod
    def from_redfish(cls, doc: Mapping[str, object]) -> Member:
        """Build from a SoftwareInventory JSON document; ``Id`` and ``Version`` are required."""
        ident, version = doc.get("Id"), doc.get("Version")
        if not isinstance(ident, str) or not ident:
            raise ValueError(f"SoftwareInventory without a string Id: {doc.get('@odata.id')!r}")
        if not isinstance(version, str) or not version:
            raise ValueError(f"SoftwareInventory {ident!r} has no string Version")
        name, software_id = doc.get("Name"), doc.get("SoftwareId")
        return cls(
            id=ident,
            version=version,
            name=name if isinstance(name, str) else None,
            software_id=software_id if isinstance(software_id, str) else None,
        )


@dataclass(frozen=True, slots=True)
class MemberMapping:
    """Where one member landed; ``label`` is the rule's label (``None`` when unknown)."""

    member_id: str
    component: Component | None
    label: str | None

    @property
    def status(self) -> MemberStatus:
        """mapped, not_a_component or unknown."""
        if self.component is not None:
            return MemberStatus.MAPPED
        return MemberStatus.UNKNOWN if self.label is None else MemberStatus.NOT_A_COMPONENT


def map_member(
    member_id: str, *, name: str | None = None, software_id: str | None = None
) -> MemberMapping:
    """Map one member id (then its ``Name``, then its ``SoftwareId``) through :data:`RULES`."""
    for candidate in (member_id, name):
        if candidate is None:
            continue
        for rule in RULES:
            if rule.pattern.fullmatch(candidate):
                return MemberMapping(member_id, rule.component, rule.label)
    if software_id is not None and software_id in SOFTWARE_IDS:
        component, label = SOFTWARE_IDS[software_id]
        return MemberMapping(member_id, component, label)
    return MemberMapping(member_id, None, None)


@dataclass(frozen=True, slots=True)
class ComponentVersions:
    """A node's component versions from its members.

    ``versions`` holds the components whose members all agree; ``conflicts`` the components whose
    members disagree (member id -> version); ``raw`` the members that are explicitly not Lockstep
    components; ``unmapped`` the members no rule knows. Every input member is in exactly one of
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


def versions_of(members: Iterable[Member] | Mapping[str, str]) -> ComponentVersions:
    """Group members by component; one common version per component or an explicit conflict."""
    items = [Member(k, v) for k, v in members.items()] if isinstance(members, Mapping) else members
    grouped: dict[Component, dict[str, str]] = {}
    result = ComponentVersions()
    for member in items:
        mapping = map_member(member.id, name=member.name, software_id=member.software_id)
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
