"""Change classes as policy data: the packaged file says what seed 000 says, and a bad file is
refused with one line naming the problem."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.adapters.policy_file import packaged_policy, read_policy
from lockstep_planner.domain.classes import PolicyError, UnfitNodes, parse_policy
from lockstep_planner.domain.fleet import ComponentKind

pytestmark = pytest.mark.unit
PACKAGED = (
    Path(__file__).resolve().parents[3]
    / "services/planner/src/lockstep_planner/data/change_classes.yaml"
)


def test_every_change_class_has_a_policy() -> None:
    assert set(packaged_policy().classes) == set(ChangeClass)


def test_default_waves_are_5_25_100_after_the_canary() -> None:
    policy = packaged_policy()
    for name in (ChangeClass.ROUTINE, ChangeClass.STANDARD, ChangeClass.POWER_FABRIC):
        assert policy[name].wave_fractions == (0.05, 0.25, 1.0)


def test_emergency_is_accelerated_and_needs_a_tested_revert() -> None:
    policy = packaged_policy()
    emergency, routine = policy[ChangeClass.EMERGENCY], policy[ChangeClass.ROUTINE]
    assert emergency.tested_revert_required
    # Accelerated by its soaks and fewer waves, not by a canary too narrow for the gate to judge
    # (tests/unit/test_packaged_policies.py).
    assert emergency.canary_soak_s < routine.canary_soak_s
    assert len(emergency.wave_fractions) < len(routine.wave_fractions)
    assert not emergency.one_way_allowed


def test_power_fabric_needs_two_distinct_approvers_one_domain_at_a_time_and_soaks_longest() -> None:
    policy = packaged_policy()
    power = policy[ChangeClass.POWER_FABRIC]
    assert power.approvals.count == 2
    assert power.approvals.distinct_approvers
    assert power.one_way_allowed
    assert power.max_fabric_domains_at_once == 1
    assert power.unfit_nodes is UnfitNodes.REFUSE
    assert power.canary_soak_s == max(c.canary_soak_s for c in policy.classes.values())
    assert power.wave_soak_s == max(c.wave_soak_s for c in policy.classes.values())
    assert [c for c, p in policy.classes.items() if p.one_way_allowed] == [ChangeClass.POWER_FABRIC]


def test_standard_is_pre_approved_only_inside_a_driver_branch_window() -> None:
    policy = packaged_policy()
    standard = policy[ChangeClass.STANDARD]
    assert standard.approvals.count == 0
    assert standard.window is not None
    assert standard.window.kinds == (ComponentKind.SOFTWARE,)
    assert "driver" in standard.window.same_branch
    assert all(policy[c].window is None for c in ChangeClass if c is not ChangeClass.STANDARD)
    assert policy[ChangeClass.ROUTINE].approvals.count == 1


def test_an_operators_file_is_read_like_the_packaged_one(tmp_path: Path) -> None:
    path = tmp_path / "classes.yaml"
    path.write_bytes(PACKAGED.read_bytes())
    assert read_policy(path) == packaged_policy()
    with pytest.raises(OSError, match=r"missing\.yaml"):
        read_policy(tmp_path / "missing.yaml")


def _broken(change: str) -> str:
    """The packaged file with one edit, given as ``path=yaml value`` (``path=`` deletes)."""
    doc = yaml.safe_load(PACKAGED.read_text())
    where, value = change.split("=", 1)
    *parents, last = where.split(".")
    node = doc
    for part in parents:
        node = node[part]
    if value:
        node[last] = yaml.safe_load(value)
    else:
        del node[last]
    return yaml.safe_dump(doc)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("classes.routine=", "missing change class(es): routine"),
        ("classes.routine.wave_fractions=[0.25, 0.05, 1.0]", "must rise strictly"),
        ("classes.routine.wave_fractions=[0.05, 0.25]", "last wave fraction must be 1.0"),
        ("classes.routine.wave_fractions=[0, 1.0]", "classes.routine.wave_fractions.0"),
        ("classes.routine.canary_min_per_stratum='2'", "classes.routine.canary_min_per_stratum"),
        ("classes.routine.canary_min_per_stratum=0", "classes.routine.canary_min_per_stratum"),
        ("classes.routine.soak=60", "classes.routine.soak: Extra inputs are not permitted"),
        ("classes.routine.approvals={count: 1, distinct_approvers: true}", "at least 2"),
        ("classes.routine.window={kinds: [software], components: [driver]}", "window is required"),
        ("classes.standard.window=", "window is required for standard"),
        ("classes.standard.window.kinds=[firmware]", "classes.standard.window.kinds.0"),
        ("classes.routine.unfit_nodes=ignore", "classes.routine.unfit_nodes"),
        ("classes.weekly=", "classes.weekly"),
        ("schema_version=2", "schema_version"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(change: str, named: str) -> None:
    if change == "classes.weekly=":
        text = PACKAGED.read_text() + "  weekly: {}\n"
    else:
        text = _broken(change)
    with pytest.raises(PolicyError, match="invalid change-class policy") as err:
        parse_policy(text)
    assert named in str(err.value)
    assert "\n" not in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("classes: [", "not YAML: expected the node content, but found '<stream end>' at line 1"),
        ("schema_version: 1\nclasses: {routine: {date: 2026-01-01}}", "not JSON serializable"),
        ("- just a list", "<root>"),
    ],
)
def test_a_file_that_is_not_a_policy_is_refused_in_one_line(text: str, named: str) -> None:
    with pytest.raises(PolicyError, match="invalid change-class policy") as err:
        parse_policy(text)
    assert named in str(err.value)
    assert "\n" not in str(err.value)
