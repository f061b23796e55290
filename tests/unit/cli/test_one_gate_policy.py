"""`lockstep up` gives the planner the healthgate's gate policy (issue 31): the planner refuses
plans whose strata the gate's [minimum] cannot judge, so both must read the same file."""

from __future__ import annotations

import pytest

from lockstep_cli.supervisor import one_gate_policy

pytestmark = pytest.mark.unit


def test_the_planner_reads_the_healthgates_policy_file() -> None:
    env = {"LOCKSTEP_HEALTHGATE_POLICY_FILE": "/etc/gate.toml"}
    assert one_gate_policy(env) == {"LOCKSTEP_PLANNER_GATE_POLICY_FILE": "/etc/gate.toml"}


def test_the_planners_own_setting_wins_and_nothing_set_adds_nothing() -> None:
    both = {
        "LOCKSTEP_HEALTHGATE_POLICY_FILE": "/etc/gate.toml",
        "LOCKSTEP_PLANNER_GATE_POLICY_FILE": "/etc/other.toml",
    }
    assert one_gate_policy(both) == {}
    assert one_gate_policy({}) == {}
