"""Canary selection: strata coverage, preferences, spread, control groups, reproducibility."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from lockstep_planner.domain.canary import choose_canary
from lockstep_planner.domain.fleet import Node
from lockstep_planner.domain.units import units_of

from .fleets import node

pytestmark = pytest.mark.unit


def pick(
    nodes: list[Node],
    minimum: int = 2,
    seed: str = "s",
    *,
    by_domain: bool = False,
    min_total: int = 0,
) -> tuple[set[str], dict[str, set[str]]]:
    """The canary's node ids, and the control ids per ``profile/supplier/stack[0]``."""
    units = units_of(nodes, by_domain=by_domain, seed=seed)
    choice = choose_canary(units, min_per_stratum=minimum, min_total=min_total, seed=seed)
    canary = {n.id for u in choice.units for n in u.nodes}
    controls = {
        f"{c.stratum.profile}/{c.stratum.supplier}/{c.stratum.stack[0]}": set(c.controls)
        for c in choice.strata
    }
    return canary, controls


def test_every_profile_supplier_and_starting_stack_gets_the_minimum() -> None:
    fleet = [
        node(i, profile=p, supplier=s, stack=h, rack=f"r{i % 7}")
        for i, (p, s, h) in enumerate(
            [
                (p, s, h)
                for p in ("gb200", "h100")
                for s in ("acme", "bolt")
                for h in ("a" * 64, "b" * 64)
            ]
            * 5
        )
    ]
    canary, _ = pick(fleet, minimum=2)
    by_stratum = Counter(n.stratum for n in fleet if n.id in canary)
    assert len(by_stratum) == 8
    assert set(by_stratum.values()) == {2}


def test_a_stratum_smaller_than_the_minimum_goes_in_whole() -> None:
    fleet = [node(1, profile="rare"), *[node(i, rack=f"r{i}") for i in range(2, 20)]]
    canary, _ = pick(fleet, minimum=3)
    assert "n1" in canary
    assert len(canary) == 4


def test_healthy_conformant_idle_nodes_are_preferred() -> None:
    fleet = [
        node(1, healthy=False),
        node(2, drifted=True),
        node(3, idle=False),
        node(4),
        node(5, idle=False, rack="r1"),
    ]
    canary, _ = pick(fleet, minimum=2)
    # n4 first; then a busy node, the one on a rack not used yet; never the sick or drifted.
    assert canary == {"n4", "n5"}


def test_the_canary_spreads_over_sites_before_racks() -> None:
    fleet = [node(i, site=f"s{i % 2}", rack=f"r{i % 4}") for i in range(40)]
    canary, _ = pick(fleet, minimum=4)
    placed = [(n.site, n.rack) for n in fleet if n.id in canary]
    assert Counter(s for s, _ in placed) == {"s0": 2, "s1": 2}
    assert len({r for _, r in placed}) == 4


def test_controls_are_as_many_untouched_peers_of_the_same_stratum_healthy_first() -> None:
    fleet = [node(i, rack=f"r{i}", healthy=i % 3 != 0) for i in range(12)] + [
        node(99, profile="h100")
    ]
    canary, controls = pick(fleet, minimum=3)
    gb200 = controls["gb200/acme/a"]
    assert len(gb200) == 3
    assert not gb200 & canary
    assert all(int(i[1:]) % 3 != 0 for i in gb200)  # the sick ones are not a baseline
    assert controls["h100/acme/a"] == set()  # its only node is the canary


def test_with_fabric_domains_as_units_the_canary_takes_whole_domains() -> None:
    fleet = [node(i, fabric_domain=f"d{i // 4}", rack=f"r{i // 4}") for i in range(16)]
    canary, controls = pick(fleet, minimum=2, by_domain=True)
    assert len(canary) == 4
    assert len({int(i[1:]) // 4 for i in canary}) == 1
    assert len(controls["gb200/acme/a"]) == 4


def test_a_strategy_can_ask_for_a_bigger_canary() -> None:
    fleet = [node(i, rack=f"r{i}") for i in range(30)]
    canary, _ = pick(fleet, minimum=1, min_total=7)
    assert len(canary) == 7


def test_same_seed_same_canary_other_seed_other_canary() -> None:
    fleet = [node(i) for i in range(200)]
    assert pick(fleet, seed="a") == pick(fleet, seed="a")
    assert pick(fleet, seed="a") != pick(fleet, seed="b")


def test_the_choice_does_not_depend_on_the_process_hash_seed() -> None:
    code = (
        "from tests.unit.planner.test_canary import pick\n"
        "from tests.unit.planner.fleets import node\n"
        "print(sorted(pick([node(i, rack=f'r{i % 9}') for i in range(300)], seed='x')[0]))\n"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(salt)},
            cwd=Path(__file__).resolve().parents[3],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for salt in (1, 2)
    }
    assert len(runs) == 1
    assert runs.pop().strip() == str(
        sorted(pick([node(i, rack=f"r{i % 9}") for i in range(300)], seed="x")[0])
    )
