"""Fleets for the planner's tests: a builder for hand-made cases and a hypothesis strategy."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from lockstep_common.events.v1 import ScopeSelector
from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.adapters.policy_file import packaged_policy
from lockstep_planner.domain.classes import ClassPolicy, UnfitNodes
from lockstep_planner.domain.fleet import (
    ONE_WAY_KINDS,
    Bundle,
    BundleComponent,
    ComponentKind,
    Node,
    Pool,
    PowerSide,
    Window,
)
from lockstep_planner.domain.plan import PlanRequest

NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)
OLD, TARGET = "a" * 64, "f" * 64


def node(i: int | str, **fields: Any) -> Node:
    """A healthy, idle, conformant node in pool p0, rack r0, site s0; override any field."""
    base = Node(
        id=f"n{i}" if isinstance(i, int) else i,
        profile="gb200",
        supplier="acme",
        site="s0",
        rack="r0",
        pool="p0",
        fabric_domain=None,
        power_side=PowerSide.A,
        stack=OLD,
        idle=True,
    )
    return replace(base, **fields)


def component(
    name: str, kind: ComponentKind = ComponentKind.SOFTWARE, **fields: Any
) -> BundleComponent:
    """A component that takes a node out for 600 s (staged 300 s, activated 300 s)."""
    return replace(BundleComponent(name, "2.0", kind, stage_s=300, activate_s=300), **fields)


def policy(change_class: ChangeClass = ChangeClass.ROUTINE, **update: Any) -> ClassPolicy:
    """The packaged policy of ``change_class`` with ``update`` applied."""
    return packaged_policy()[change_class].model_copy(update=update)


def request(
    nodes: list[Node],
    components: list[BundleComponent] | None = None,
    *,
    pools: dict[str, Pool] | None = None,
    change_class: ChangeClass = ChangeClass.ROUTINE,
    class_policy: ClassPolicy | None = None,
    seed: str = "seed",
    **fields: Any,
) -> PlanRequest:
    """A request over ``nodes`` with generous pools unless given."""
    counts = Counter(n.pool for n in nodes)
    return PlanRequest(
        fleet=tuple(nodes),
        pools=pools if pools is not None else {p: Pool(p, max(c, 1)) for p, c in counts.items()},
        bundle=Bundle(TARGET, tuple(components or [component("driver")])),
        scope=fields.pop("scope", ScopeSelector()),
        change_class=change_class,
        policy=class_policy or policy(change_class),
        seed=seed,
        **fields,
    )


def nightly(hours: int = 6, days: int = 60) -> tuple[Window, ...]:
    """Non-overlapping nightly windows from 22:00 (the night before NOW) for ``days`` days."""
    first = NOW.replace(hour=22) - timedelta(days=1)
    return tuple(
        Window(first + timedelta(days=k), first + timedelta(days=k, hours=hours))
        for k in range(days)
    )


KINDS = list(ComponentKind)


@st.composite
def cases(draw: st.DrawFn) -> PlanRequest:
    """A random fleet (1-80 nodes), pools with budgets and nightly windows or none, fabric
    domains of up to 4 nodes that may span pools, and a bundle of 1-5 components."""
    pool_count = draw(st.integers(1, 4))
    pools = {
        f"p{i}": Pool(f"p{i}", draw(st.integers(1, 5)), draw(st.sampled_from([None, nightly()])))
        for i in range(pool_count)
    }
    size = draw(st.integers(1, 80))
    profiles = draw(st.sampled_from([["gb200"], ["gb200", "h100"], ["gb200", "gb300", "h100"]]))
    suppliers = draw(st.sampled_from([["acme"], ["acme", "bolt"]]))
    nodes: list[Node] = []
    domain, left_in_domain = 0, 0
    for i in range(size):
        if left_in_domain == 0:
            domain += 1
            left_in_domain = draw(st.integers(1, 4))
        left_in_domain -= 1
        in_domain = draw(st.booleans()) or left_in_domain > 0
        nodes.append(
            Node(
                id=f"n{i:02d}",
                profile=draw(st.sampled_from(profiles)),
                supplier=draw(st.sampled_from(suppliers)),
                site=draw(st.sampled_from(["s0", "s1"])),
                rack=f"r{domain % 5}",
                pool=draw(st.sampled_from(sorted(pools))),
                fabric_domain=f"d{domain}" if in_domain else None,
                power_side=draw(st.sampled_from(list(PowerSide))),
                stack=draw(st.sampled_from([OLD, OLD, OLD, OLD, "b" * 64, TARGET])),
                drifted=draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans()),
                readable=not (draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans())),
                idle=draw(st.booleans()),
                healthy=draw(st.integers(0, 9)) > 0,
            )
        )
    components = [
        BundleComponent(
            name=f"c{i}",
            version="2.0",
            kind=draw(st.sampled_from(KINDS)),
            stage_s=draw(st.integers(0, 1800)),
            activate_s=draw(st.integers(0, 900)),
            impactless_staging=draw(st.booleans()),
            profiles=draw(
                st.sampled_from([None, frozenset({"gb200"}), frozenset({"h100", "gb300"})])
            ),
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    one_way = any(c.kind in ONE_WAY_KINDS for c in components)
    change_class = (
        ChangeClass.POWER_FABRIC
        if one_way
        else draw(
            st.sampled_from([ChangeClass.ROUTINE, ChangeClass.EMERGENCY, ChangeClass.POWER_FABRIC])
        )
    )
    class_policy = policy(
        change_class,
        canary_min_per_stratum=draw(st.integers(1, 3)),
        unfit_nodes=UnfitNodes.EXCLUDE,
        max_fabric_domains_at_once=draw(st.sampled_from([None, 1, 2])),
    )
    return PlanRequest(
        fleet=tuple(nodes),
        pools=pools,
        bundle=Bundle(TARGET, tuple(components)),
        scope=ScopeSelector(),
        change_class=change_class,
        policy=class_policy,
        seed=draw(st.sampled_from(["s1", "s2", "intent-3"])),
        tested_revert=True,
    )
