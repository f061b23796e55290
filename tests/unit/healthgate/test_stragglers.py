"""Stragglers against their peers, and the versions they share (issue 11, deliverable 6)."""

from __future__ import annotations

import random

import pytest

from lockstep_common.vocabulary import Component
from lockstep_healthgate.domain.stragglers import NodeWindow, StragglerRules, find_stragglers

pytestmark = pytest.mark.unit
RULES = StragglerRules()
GOOD_NIC, BAD_NIC = "28.42.1234", "28.39.1002"


def fleet(
    n: int = 200, *, slow: dict[int, float] | None = None, nic: dict[int, str] | None = None
) -> list[NodeWindow]:
    rng = random.Random(11)
    slow, nic = slow or {}, nic or {}
    return [
        NodeWindow(
            node_id=f"n{i:03d}",
            site="ams1",
            profile="gb200",
            medians={
                "nccl_busbw_gbps": slow.get(i, rng.gauss(400, 3)),
                "sm_clock_mhz": rng.gauss(1980, 5),
            },
            versions={Component.NIC: nic.get(i, GOOD_NIC), Component.BMC: "24.12"},
        )
        for i in range(n)
    ]


def test_slow_nodes_are_flagged_worst_first_with_the_nic_version_they_share() -> None:
    slow = {7: 340.0, 8: 362.0, 9: 355.0}
    [finding] = find_stragglers(fleet(slow=slow, nic=dict.fromkeys(slow, BAD_NIC)), RULES)
    assert [o.node_id for o in finding.outliers] == ["n007", "n009", "n008"]
    assert all(o.signal == "nccl_busbw_gbps" and o.deviations > 5 for o in finding.outliers)
    [shared] = finding.shared  # the BMC version everyone runs is no explanation
    assert (shared.component, shared.version) == (Component.NIC, BAD_NIC)
    assert (shared.stragglers_with, shared.stragglers, shared.peers_with) == (3, 3, 0)
    assert shared.p_value < 1e-5


def test_a_version_the_healthy_peers_run_too_is_not_blamed() -> None:
    slow = {7: 340.0, 8: 362.0}
    common = dict.fromkeys([*slow, *range(20, 120)], BAD_NIC)  # half the fleet runs it
    [finding] = find_stragglers(fleet(slow=slow, nic=common), RULES)
    assert finding.straggler_ids == {"n007", "n008"} and finding.shared == ()


def test_a_fleet_wide_drop_makes_no_straggler() -> None:
    everyone = {i: 360.0 + (i % 5) for i in range(200)}
    [finding] = find_stragglers(fleet(slow=everyone), RULES)
    assert finding.outliers == ()


def test_a_tight_fleet_does_not_flag_a_fraction_of_a_percent() -> None:
    nodes = [
        NodeWindow(f"n{i}", "ams1", "gb200", {"nccl_busbw_gbps": 400.0}, {}) for i in range(50)
    ]
    nodes.append(NodeWindow("slightly", "ams1", "gb200", {"nccl_busbw_gbps": 398.8}, {}))
    nodes.append(NodeWindow("slow", "ams1", "gb200", {"nccl_busbw_gbps": 370.0}, {}))
    [finding] = find_stragglers(nodes, RULES)
    assert finding.straggler_ids == {"slow"}  # 0.3% is within min_drop, 7.5% is not


def test_too_few_peers_are_not_judged() -> None:
    [finding] = find_stragglers(fleet(n=RULES.min_nodes - 1, slow={0: 100.0}), RULES)
    assert finding.outliers == () and finding.nodes == RULES.min_nodes - 1


def test_a_node_slow_on_both_signals_is_listed_once_on_its_worst() -> None:
    nodes = fleet()
    hot = nodes[5]
    nodes[5] = NodeWindow(
        hot.node_id,
        hot.site,
        hot.profile,
        {"nccl_busbw_gbps": 370.0, "sm_clock_mhz": 1500.0},
        hot.versions,
    )
    [finding] = find_stragglers(nodes, RULES)
    [only] = finding.outliers
    assert (only.node_id, only.signal) == ("n005", "sm_clock_mhz")


def test_profiles_are_judged_apart_and_each_is_reported() -> None:
    h100 = [
        NodeWindow(f"h{i}", "ams1", "hgx-h100", {"nccl_busbw_gbps": 250.0 + i % 3}, {})
        for i in range(30)
    ]
    findings = find_stragglers([*fleet(), *h100], RULES)
    assert [(f.profile, f.nodes, f.outliers) for f in findings] == [
        ("gb200", 200, ()),
        ("hgx-h100", 30, ()),
    ]  # 250 is not slow for an H100, though it would be for a GB200
