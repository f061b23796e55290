"""compose.sim.yaml, the lab overlay the container test deploys (issue 31): the simulator as one
more service on the deployment's network, reachable by name, its agents as enrolled identities
and its BMC password a file; the planner's lab classes differ from the packaged ones only in
the routine class's soaks and waves; production's compose.yaml has no simulator."""

from __future__ import annotations

import importlib.resources
import re
from typing import Any

import pytest
import yaml

from tests.unit.ops.metric_names import ROOT

pytestmark = pytest.mark.unit

OVERLAY = ROOT / "compose.sim.yaml"
LAB_CLASSES = ROOT / "deploy" / "sim" / "change_classes.yaml"
DEPLOY = "${LOCKSTEP_DEPLOY_DIR:-./deployment}"


def overlay() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(OVERLAY.read_text())
    return doc


def test_production_compose_has_no_simulator_and_the_overlay_only_adds_to_it() -> None:
    production = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert "sim" not in production["services"]
    assert "LOCKSTEP_PLANNER_POLICY_FILE" not in production["services"]["planner"]["environment"]
    assert set(overlay()["services"]) == {"sim", "planner"}


def test_the_simulator_is_reached_by_its_service_name_and_its_agents_are_enrolled() -> None:
    sim = overlay()["services"]["sim"]
    args = dict(a.removeprefix("--").split("=", 1) for a in sim["command"][1:])
    assert sim["command"][0] == "run"
    assert args["advertise"] == "sim"  # /fleet.json names http://sim:PORT, not a loopback
    assert args["agent-seeds"] == "/run/agent-seeds"
    assert f"{DEPLOY}/secrets/agents:/run/agent-seeds:ro" in sim["volumes"]
    assert args["password-file"] == "/run/secrets/sim-bmc-password"
    assert "LOCKSTEP_NATS_USER" not in sim["environment"]  # each agent as its own identity
    assert overlay()["secrets"]["sim-bmc-password"]["file"] == f"{DEPLOY}/sim/bmc-password"
    for service in overlay()["services"].values():
        for key in service.get("environment") or {}:
            if re.search("PASSWORD|SECRET|TOKEN", key):
                assert key.endswith("_FILE"), f"{key} holds a secret in compose.sim.yaml"


def test_the_lab_classes_are_the_packaged_ones_with_short_routine_soaks() -> None:
    packaged = yaml.safe_load(
        importlib.resources.files("lockstep_planner")
        .joinpath("data/change_classes.yaml")
        .read_text()
    )
    lab = yaml.safe_load(LAB_CLASSES.read_text())
    short = {"wave_fractions": [1.0], "canary_soak_s": 20, "layer_soak_s": 0, "wave_soak_s": 20}
    packaged["classes"]["routine"].update(short)
    assert lab == packaged
    planner = overlay()["services"]["planner"]
    mounted = "./deploy/sim/change_classes.yaml:/etc/lockstep/lab/change_classes.yaml:ro"
    assert planner["volumes"] == [mounted]
    policy = planner["environment"]["LOCKSTEP_PLANNER_POLICY_FILE"]
    assert mounted.split(":")[1] == policy
