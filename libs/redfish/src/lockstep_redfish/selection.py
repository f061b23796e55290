"""Which profile a BMC speaks, and which of its members hold which component (pure).

:func:`facts_from` gathers what the service root, ``UpdateService``, the ``Manager`` collection
and ``FirmwareInventory`` say (read with GETs only, ``probe``); :func:`select_profile` keeps the
shipped profiles every stated ``match`` clause of which holds, and picks the one with the highest
``priority`` (then the most clauses held): ``dmtf-generic`` states none and is what remains. A
per-node override names a profile instead (``profile.profile_named``).

:func:`map_member` walks a profile's member rows in order; the first row any hint of which holds
decides (member id glob, ``SoftwareId``, ``RelatedItem`` glob, ``Oem`` value).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from lockstep_common.vocabulary import Component
from lockstep_redfish.profile import BmcProfile, MemberRule, shipped_profiles


@dataclass(frozen=True, slots=True)
class MemberFacts:
    """One FirmwareInventory member as read (only ``id`` when only its path is known)."""

    id: str
    software_id: str | None = None
    related: tuple[str, ...] = ()
    oem: Mapping[str, Any] = field(default_factory=dict)
    version: str | None = None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> MemberFacts:
        related = doc.get("RelatedItem")
        items = related if isinstance(related, list) else []
        oem, software_id, version = doc.get("Oem"), doc.get("SoftwareId"), doc.get("Version")
        return cls(
            id=str(doc.get("Id", "")),
            software_id=software_id if isinstance(software_id, str) else None,
            related=tuple(
                str(r["@odata.id"]) for r in items if isinstance(r, dict) and "@odata.id" in r
            ),
            oem=oem if isinstance(oem, dict) else {},
            version=version if isinstance(version, str) else None,
        )


@dataclass(frozen=True, slots=True)
class BmcFacts:
    """What a BMC says about itself, as read."""

    root: Mapping[str, Any]
    update_service: Mapping[str, Any] | None
    managers: tuple[str, ...]  # Manager member ids
    members: tuple[MemberFacts, ...]
    documents: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Each member's document as read, by its path (``probe.read_facts``): the same step's
    preflight decides on them instead of reading them again (``FirmwareUpdate.preflight``)."""

    @property
    def update_actions(self) -> set[str]:
        """Every action name of UpdateService, the OEM ones included (``#Vendor.Action``)."""
        actions = (self.update_service or {}).get("Actions")
        if not isinstance(actions, dict):
            return set()
        keys = list(actions)
        oem = actions.get("Oem")
        if isinstance(oem, dict):
            keys += list(oem)
            keys += [k for vendor in oem.values() if isinstance(vendor, dict) for k in vendor]
        # "#UpdateService.SimpleUpdate", or "DellUpdateService.v1_1_0#DellUpdateService.Install"
        return {"#" + k.split("#", 1)[1] for k in keys if "#" in k}

    @property
    def offers_sessions(self) -> bool:
        """Whether the service root links a SessionService (DSP0266 §13.3)."""
        links = self.root.get("Links")
        sessions = isinstance(links, dict) and "Sessions" in links
        return sessions or "SessionService" in self.root


def facts_from(
    root: Mapping[str, Any],
    update_service: Mapping[str, Any] | None,
    managers: Iterable[str],
    members: Iterable[Mapping[str, Any]],
) -> BmcFacts:
    """:class:`BmcFacts` from the documents read (members: SoftwareInventory documents)."""
    return BmcFacts(
        root, update_service, tuple(managers), tuple(MemberFacts.from_doc(m) for m in members)
    )


def _any(globs: Sequence[str], values: Iterable[str]) -> bool:
    return any(fnmatchcase(v, g) for v in values for g in globs)


def clauses_held(profile: BmcProfile, facts: BmcFacts) -> list[str] | None:
    """The ``match`` clauses of ``profile`` that ``facts`` satisfy, named; None when a stated
    clause does not hold."""
    m, root = profile.match, facts.root
    vendor, product = root.get("Vendor"), root.get("Product")
    oem = root.get("Oem")
    checks: list[tuple[str, bool, bool]] = [
        ("vendor", bool(m.vendor), isinstance(vendor, str) and vendor in m.vendor),
        ("product", bool(m.product), isinstance(product, str) and _any(m.product, [product])),
        ("root_oem", bool(m.root_oem), isinstance(oem, dict) and bool(set(m.root_oem) & set(oem))),
        (
            "update_actions",
            bool(m.update_actions),
            bool(set(m.update_actions) & facts.update_actions),
        ),
        ("managers", bool(m.managers), _any(m.managers, facts.managers)),
        ("members", bool(m.members), _any(m.members, (f.id for f in facts.members))),
    ]
    if any(stated and not held for _, stated, held in checks):
        return None
    return [name for name, stated, _ in checks if stated]


@dataclass(frozen=True, slots=True)
class Selection:
    """The profile chosen and why (the clauses that held), with every profile that matched."""

    profile: BmcProfile
    because: tuple[str, ...]
    candidates: tuple[str, ...]


def select_profile(facts: BmcFacts, profiles: Sequence[BmcProfile] | None = None) -> Selection:
    """The best matching profile (module docstring); ValueError when none matches."""
    scored = []
    for profile in profiles if profiles is not None else shipped_profiles():
        held = clauses_held(profile, facts)
        if held is not None:
            scored.append(((profile.match.priority, len(held)), profile, held))
    if not scored:
        raise ValueError("no BMC profile matches what this BMC says (none is generic)")
    scored.sort(key=lambda s: (s[0], s[1].id), reverse=True)
    _, best, held = scored[0]
    return Selection(best, tuple(held), tuple(p.id for _, p, _ in scored))


@dataclass(frozen=True, slots=True)
class MemberMapping:
    """Where a member landed: a component, or raw with a label; both None: unknown."""

    member_id: str
    component: Component | None
    label: str | None


def _oem_holds(expected: str, oem: Mapping[str, Any]) -> bool:
    path, _, value = expected.partition("=")
    node: Any = oem
    for key in path.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node is not None and str(node) == value


def _rule_holds(rule: MemberRule, member: MemberFacts) -> bool:
    return (
        _any(rule.ids, [member.id])
        or (member.software_id is not None and member.software_id in rule.software_ids)
        or _any(rule.related, member.related)
        or any(_oem_holds(o, member.oem) for o in rule.oem)
    )


def map_member(profile: BmcProfile, member: MemberFacts) -> MemberMapping:
    """The first of ``profile``'s member rows that ``member`` satisfies."""
    for rule in profile.members:
        if _rule_holds(rule, member):
            return MemberMapping(member.id, rule.component, rule.label)
    return MemberMapping(member.id, None, None)


def members_of(
    profile: BmcProfile, component: Component, members: Iterable[MemberFacts]
) -> tuple[str, ...]:
    """The ids of ``members`` that hold ``component`` under ``profile``, sorted."""
    return tuple(sorted(m.id for m in members if map_member(profile, m).component is component))


def map_member_shipped(member: MemberFacts) -> MemberMapping:
    """``member`` read by the shipped profiles, highest ``priority`` first (then by id): the
    first that recognises it decides. For a caller that has not chosen the BMC's profile."""
    ordered = sorted(shipped_profiles(), key=lambda p: (-p.match.priority, p.id))
    for profile in ordered:
        found = map_member(profile, member)
        if found.label is not None:
            return found
    return MemberMapping(member.id, None, None)
