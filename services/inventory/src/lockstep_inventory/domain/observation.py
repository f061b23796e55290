"""One node's report from one source, when a report may replace the last one, and what changed.

Two sources describe a node: the BMC over Redfish (firmware) and the in-band agent (driver,
CUDA, NCCL, kernel, GSP firmware, Fabric Manager). Each keeps its own latest report; the drift
evaluation merges them (:func:`merge`), the in-band source winning for in-band components
because the BMC cannot see a loaded kernel module.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from lockstep_common.errors import InvalidMessage
from lockstep_common.vocabulary import Component, ObservationSource, clip_text
from lockstep_inventory.domain.members import Member, versions_of
from lockstep_redfish.profile import BmcProfile

# Components only the node itself can report (design.md "inventory": agent telemetry).
IN_BAND: frozenset[Component] = frozenset(
    {
        Component.DRIVER,
        Component.CUDA,
        Component.NCCL,
        Component.CUDNN,
        Component.CONTAINER_TOOLKIT,
        Component.FABRIC_MANAGER,
        Component.KERNEL,
        Component.GPU_GSP,
    }
)

# An agent that restarts counts its reports from 0 again. A report with a lower sequence is
# accepted as a restart only when it was observed this much later than the last applied one;
# otherwise it is a late or duplicate delivery and changes nothing.
SEQUENCE_RESET_AFTER = dt.timedelta(minutes=5)
# How far one report's sequence may run ahead of the stored one. An agent reporting every 10 s
# needs 115 days to count this far; a sweep's sequence is its sweep number. A report leaping
# further is forged or broken: accepted, it would make every genuine report look stale.
MAX_SEQUENCE_LEAP = 1_000_000


class ImplausibleReport(InvalidMessage):
    """A report that cannot be genuine (a sequence leap, a time after it was sent)."""


@dataclass(frozen=True, slots=True)
class Observation:
    """The latest applied report of one source for one node (pure value).

    ``readable=False`` (a BMC that could not be read) keeps the last known versions: drift is
    judged on what was last seen, and the admission check refuses the node for being unreadable.
    ``firmware_dirs=None`` means "not reported" (an empty tuple means "none present").
    """

    source: ObservationSource
    sequence: int
    observed_at: dt.datetime
    readable: bool = True
    error: str | None = None
    unreadable_since: dt.datetime | None = None
    components: Mapping[Component, str] = field(default_factory=dict)
    conflicts: Mapping[Component, Mapping[str, str]] = field(default_factory=dict)
    members: Mapping[str, str] = field(default_factory=dict)
    firmware_dirs: tuple[str, ...] | None = None
    loaded_module: str | None = None

    def supersedes(self, previous: Observation | None) -> bool:
        """True when this report is newer than ``previous`` (same node, same source)."""
        if previous is None or self.sequence > previous.sequence:
            return True
        return self.observed_at - previous.observed_at > SEQUENCE_RESET_AFTER

    def after_failure(self, previous: Observation | None) -> Observation:
        """An unreadable report keeps the last known versions and when the failures began."""
        if self.readable or previous is None:
            return self
        since = previous.unreadable_since if not previous.readable else None
        return Observation(
            source=self.source,
            sequence=self.sequence,
            observed_at=self.observed_at,
            readable=False,
            error=self.error,
            unreadable_since=since or self.observed_at,
            components=previous.components,
            conflicts=previous.conflicts,
            members=previous.members,
            firmware_dirs=previous.firmware_dirs,
            loaded_module=previous.loaded_module,
        )


def content_digest(obs: Observation) -> str:
    """A digest of everything a report says except its sequence, times and readability: equal
    digests, equal versions (the stored row need not be read to know nothing changed)."""
    content = (
        sorted((str(c), v) for c, v in obs.components.items()),
        sorted((str(c), sorted(m.items())) for c, m in obs.conflicts.items()),
        sorted(obs.members.items()),
        obs.firmware_dirs,
        obs.loaded_module,
    )
    return hashlib.blake2b(repr(content).encode(), digest_size=16).hexdigest()


def from_redfish_members(
    sequence: int, observed_at: dt.datetime, members: list[Member], profile: BmcProfile | None
) -> Observation:
    """A readable Redfish report: members grouped into components by the BMC's profile
    (``members.map_member``; conflicts kept explicit)."""
    grouped = versions_of(members, profile)
    return Observation(
        source=ObservationSource.REDFISH,
        sequence=sequence,
        observed_at=observed_at,
        components=grouped.versions,
        conflicts=grouped.conflicts,
        members={m.id: m.version for m in members},
    )


def unreadable(
    source: ObservationSource, sequence: int, observed_at: dt.datetime, error: str
) -> Observation:
    """A report that says the source could not be read, and why."""
    return Observation(
        source=source,
        sequence=sequence,
        observed_at=observed_at,
        readable=False,
        error=clip_text(error),
        unreadable_since=observed_at,
    )


@dataclass(frozen=True, slots=True)
class Merged:
    """What drift is judged on: both sources merged."""

    actual: dict[Component, str]
    conflicts: dict[Component, Mapping[str, str]]
    firmware_dirs: tuple[str, ...] | None
    loaded_module: str | None


def merge(observations: Mapping[ObservationSource, Observation]) -> Merged:
    """Redfish for firmware, the agent for in-band components; either fills what the other lacks."""
    redfish = observations.get(ObservationSource.REDFISH)
    agent = observations.get(ObservationSource.AGENT)
    actual: dict[Component, str] = {}
    conflicts: dict[Component, Mapping[str, str]] = {}
    for obs, wins in ((redfish, False), (agent, True)):
        if obs is None:
            continue
        seen = set(actual) | set(conflicts)  # what the other source already said
        for component, version in obs.components.items():
            if wins == (component in IN_BAND) or component not in seen:
                actual[component] = version
                conflicts.pop(component, None)
        for component, by_member in obs.conflicts.items():
            if wins == (component in IN_BAND) or component not in seen:
                conflicts[component] = by_member
                actual.pop(component, None)
    return Merged(
        actual,
        conflicts,
        agent.firmware_dirs if agent else None,
        agent.loaded_module if agent else None,
    )


def changes(
    previous: Observation | None, current: Observation
) -> Iterator[tuple[str, str | None, str | None]]:
    """(item, old, new) for every member/fact whose version changed, plus ``readable``."""
    before = previous.members if previous else {}
    after = current.members
    if current.source is ObservationSource.AGENT:
        before = {**_agent_facts(previous), **before} if previous else {}
        after = {**_agent_facts(current), **after}
    for item in sorted(set(before) | set(after)):
        old, new = before.get(item), after.get(item)
        if old != new:
            yield item, old, new
    was = previous.readable if previous else None
    if was != current.readable:
        yield "readable", _flag(was), _flag(current.readable)


def _agent_facts(obs: Observation) -> dict[str, str]:
    facts = {str(c): v for c, v in obs.components.items()}
    if obs.loaded_module is not None:
        facts["loaded_module"] = obs.loaded_module
    if obs.firmware_dirs is not None:
        facts["firmware_dirs"] = ",".join(sorted(obs.firmware_dirs))
    return facts


def _flag(value: bool | None) -> str | None:
    return None if value is None else str(value).lower()
