"""What the planner's inputs become before planning: attested bundle components and inventory
fleet pages turned into the planning model (``fleet.Bundle``, ``fleet.Node``), pure.

The bundle's manifest says per image how it is applied (``banks``, ``activation``); the plan's
layers (seed 000: software, then A/B firmware, then one-way firmware, reversible first) and the
outage estimates are derived from that here. The durations are estimates for ordering and the
dry-run only: the updater times each real step, and the healthgate judges, not these numbers.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

from lockstep_common import canonical
from lockstep_common.events.v1 import AttestedComponent, FleetNode
from lockstep_common.vocabulary import Component, DriftKind
from lockstep_planner.domain.fleet import Bundle, BundleComponent, ComponentKind, Node, PowerSide

# GSP firmware ships inside the driver package and is loaded with it (it must equal the
# driver), so it moves with the software layer, as the standard class's window expects.
SOFTWARE = frozenset(
    {
        Component.DRIVER,
        Component.GPU_GSP,
        Component.CUDA,
        Component.NCCL,
        Component.CUDNN,
        Component.CONTAINER_TOOLKIT,
        Component.FABRIC_MANAGER,
        Component.KERNEL,
    }
)
POWER = frozenset({Component.PSU, Component.BBU})
INSIDE_DRIVER = frozenset({Component.GPU_GSP})
"""Pinned with the driver (the compatibility rules need it equal to the driver), but not handed
to the updater on its own: its firmware ships inside the driver package (seed 004) and the
driver's in-band unit verifies it (the loaded module and the GSP firmware of the same version)."""

# (stage_s, activate_s) per activation method: a reset or reboot costs a node minutes, an AC
# cycle the longest (seed 000's update-class table orders them the same way).
DURATIONS: dict[str, tuple[int, int]] = {
    "immediate": (120, 30),
    "in_band": (300, 120),
    "reset": (600, 300),
    "reboot": (600, 600),
    "ac_cycle": (900, 900),
}

UNEXPLAINED = frozenset({DriftKind.UNEXPECTED, DriftKind.INCOMPATIBLE, DriftKind.GSP_MISMATCH})
"""Drift the planner will not paper over; ``pending`` (mid-rollout) and ``missing`` are not."""
REMEDIABLE = frozenset({DriftKind.INCOMPATIBLE, DriftKind.GSP_MISMATCH})
"""Unexplained drift a rollout may repair: moved anyway when the target leaves the node with no
critical broken rule (``compatibility.check_target``)."""


Reversible = Callable[[str, Component], bool | None]
"""(hardware profile, component) -> whether that profile's BMC keeps the component's previous
image to run again (``lockstep_redfish.bank.keeps_previous_image`` of its BMC profile); None
where no BMC profile is known for the hardware profile."""


def kind_of(
    component: AttestedComponent, reversible: Reversible | None = None, *profiles: str
) -> ComponentKind:
    """The plan layer an image belongs to. Firmware the bundle calls A/B is one-way where the
    BMC of any hardware profile it applies to (``component.profile`` and ``profiles``) keeps no
    previous image to run (the BMC's answer, not the manifest's); where no BMC profile is
    known, the bundle's ``banks`` stands."""
    name = Component(component.component)
    if name in SOFTWARE:
        return ComponentKind.SOFTWARE
    if name is Component.NVSWITCH:
        return ComponentKind.FABRIC_SWITCH
    if name in POWER:
        return ComponentKind.PSU_BBU
    if component.banks == "one_way":
        return ComponentKind.ONE_WAY_FIRMWARE
    answers = {reversible(p, name) for p in {component.profile, *profiles}} if reversible else set()
    if False in answers:
        return ComponentKind.ONE_WAY_FIRMWARE
    return ComponentKind.AB_FIRMWARE


def bundle_of(
    stack_hash: str,
    components: Sequence[AttestedComponent],
    reversible: Reversible | None = None,
) -> Bundle:
    """The planning model of an attested bundle: one component per (component, version), with
    the hardware profiles it applies to, in manifest order; A/B or one-way as :func:`kind_of`
    says with ``reversible``."""
    profiles: dict[tuple[str, str], set[str]] = defaultdict(set)
    first: dict[tuple[str, str], AttestedComponent] = {}
    for c in components:
        key = (str(c.component), c.version)
        profiles[key].add(c.profile)
        first.setdefault(key, c)
    out = []
    for key, c in first.items():
        stage, activate = DURATIONS.get(c.activation, DURATIONS["reboot"])
        kind = kind_of(c, reversible, *profiles[key])
        out.append(
            BundleComponent(
                name=key[0],
                version=c.version,
                kind=kind,
                stage_s=stage,
                activate_s=activate,
                # A/B devices stage into the idle bank while the node works (seed 000).
                impactless_staging=c.banks == "ab" and kind is not ComponentKind.SOFTWARE,
                profiles=frozenset(profiles[key]),
                reflash=c.banks == "ab" and kind is ComponentKind.ONE_WAY_FIRMWARE,
            )
        )
    return Bundle(stack_hash, tuple(out))


def installable(components: Iterable[str]) -> tuple[str, ...]:
    """A wave's components as the updater is handed them (``wave.planned``), in the order it
    works: firmware first (through the BMC), then the software layer (through the node agent,
    once the firmware verified); those inside the driver package are left out when the driver
    is there to bring them."""
    names = tuple(dict.fromkeys(components))
    if Component.DRIVER.value in names:
        names = tuple(c for c in names if Component(c) not in INSIDE_DRIVER)
    firmware = tuple(c for c in names if Component(c) not in SOFTWARE)
    return firmware + tuple(c for c in names if Component(c) in SOFTWARE)


def stack_of(components: Iterable[AttestedComponent]) -> dict[str, dict[str, str]]:
    """profile -> component -> version: what a pin of this bundle says."""
    stack: dict[str, dict[str, str]] = defaultdict(dict)
    for c in components:
        stack[c.profile][str(c.component)] = c.version
    return {p: dict(sorted(v.items())) for p, v in sorted(stack.items())}


def is_drifted(node: FleetNode, *, remedied: bool) -> bool:
    """Unexplained drift keeps a node out, unless it is only incompatibility the target repairs."""
    kinds = {i.kind for i in node.drift if i.kind in UNEXPLAINED}
    return bool(kinds - REMEDIABLE) if remedied else bool(kinds)


def node_of(
    node: FleetNode,
    target: Mapping[str, Mapping[str, str]],
    stack_hash: str,
    *,
    remedied: bool = False,
) -> Node:
    """The planning model of one inventory node.

    Its stack is the target's hash when every component the target pins for its profile is
    observed at that version (already at target: left alone), else the hash of what it runs
    (:func:`whole_stack`, conflicts included), so nodes starting from the same versions share a
    stratum and nodes differing in any component, one NIC family's firmware included, do not.
    """
    wanted = target.get(node.profile, {})
    observed = whole_stack(node)
    at_target = bool(wanted) and all(observed.get(c) == v for c, v in wanted.items())
    stack = stack_hash if at_target else _observed_hash(node.profile, tuple(observed.items()))
    side = PowerSide.B if node.power_side.upper() == "B" else PowerSide.A
    return Node(
        id=node.node_id,
        profile=node.profile,
        supplier=node.supplier or "unknown",
        site=node.site,
        rack=node.rack or "unknown",
        pool=node.pool or "default",
        fabric_domain=node.fabric_domain or None,
        power_side=side,
        stack=stack,
        drifted=is_drifted(node, remedied=remedied),
        readable=node.readable is True,
    )


def whole_stack(node: FleetNode) -> dict[str, str]:
    """Component -> version of everything the node runs. A component whose members run
    different versions (a GB200 tray's two NIC families) counts as the set of those versions,
    sorted and joined with ``|``, as a pin names it (the inventory's ``pins.stack_of``)."""
    stack = {str(k): v for k, v in node.observed.items()}
    for component, by_member in node.conflicts.items():
        stack[str(component)] = "|".join(sorted(set(by_member.values())))
    return stack


@functools.lru_cache(maxsize=4096)
def _observed_hash(profile: str, observed: tuple[tuple[str, str], ...]) -> str:
    """The hash of what a node runs. Thousands of nodes run the same few stacks, and hashing
    each one's canonical JSON was a fifth of planning 12,500 nodes (issue 27, item 3)."""
    return canonical.stack_hash({profile: dict(observed)})


def current_versions(nodes: Iterable[FleetNode]) -> dict[str, str]:
    """Component -> version where every node in scope that reports it agrees: what a standard
    change's window is checked against (a component the scope disagrees on is left out, so a
    change to it is judged as coming from an unknown version)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for node in nodes:
        for component, version in whole_stack(node).items():
            seen[component].add(version)
    return {c: next(iter(v)) for c, v in sorted(seen.items()) if len(v) == 1}
