"""The change-class policy files: the one packaged with the service, or an operator's.

Read once, at start, and handed to the planning code: the domain reads no file (issue 10:
"Change classes as policy data (file, validated at start)").
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from lockstep_gate.policy_files import default_policy, load_policy
from lockstep_planner.domain.classes import Policy, parse_policy
from lockstep_planner.domain.judgeable import GateMinimum


@cache  # the packaged file does not change while the process runs
def packaged_policy() -> Policy:
    """The policy shipped with the service (``lockstep_planner/data/change_classes.yaml``)."""
    resource = resources.files("lockstep_planner").joinpath("data/change_classes.yaml")
    return parse_policy(resource.read_bytes())


def read_policy(path: Path) -> Policy:
    """An operator's policy; ``OSError`` when it cannot be read, ``PolicyError`` when it is
    malformed."""
    return parse_policy(path.read_bytes())


def gate_minimum(path: Path | None) -> GateMinimum:
    """The minimum sample per stratum of the healthgate's gate policy (the packaged one when
    ``path`` is None): the planner refuses a plan whose canary could never meet it.
    ``lockstep_gate.policy.PolicyError`` (one line) when the file is unreadable or invalid."""
    minimum = (default_policy() if path is None else load_policy(path)).minimum
    return GateMinimum(minimum.canary_nodes, minimum.control_nodes)
