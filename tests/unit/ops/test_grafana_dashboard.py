"""deploy/grafana/lockstep.json: every panel queries only metrics the code exports, and the
rollout and conformance views the operations guide promises are there."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.ops.metric_names import PROMETHEUS_OWN, ROOT, declared, referenced

pytestmark = pytest.mark.unit

DASHBOARD = ROOT / "deploy" / "grafana" / "lockstep.json"


def panels() -> list[dict[str, Any]]:
    top = json.loads(DASHBOARD.read_text())["panels"]
    return [p for panel in top for p in (panel, *panel.get("panels", []))]


def queried() -> set[str]:
    return {name for p in panels() for t in p.get("targets", []) for name in referenced(t["expr"])}


def test_every_panel_queries_only_exported_metrics() -> None:
    known = declared() | PROMETHEUS_OWN
    unknown = {
        p["title"]: sorted(referenced(t["expr"]) - known)
        for p in panels()
        for t in p.get("targets", [])
    }
    assert {title: names for title, names in unknown.items() if names} == {}


def test_every_panel_but_a_row_has_a_query_on_the_chosen_datasource() -> None:
    for p in panels():
        if p["type"] == "row":
            continue
        assert p["targets"], p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert all(t["datasource"] == p["datasource"] for t in p["targets"]), p["title"]


def test_panel_ids_are_unique_and_panels_do_not_overlap() -> None:
    ids = [p["id"] for p in panels()]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in panels():
        g = p["gridPos"]
        mine = {(g["x"] + dx, g["y"] + dy) for dx in range(g["w"]) for dy in range(g["h"])}
        assert not mine & cells, p["title"]
        assert g["x"] + g["w"] <= 24, p["title"]
        cells |= mine


def test_rollouts_and_fleet_conformance_are_shown() -> None:
    assert queried() >= {
        "lockstep_planner_rollouts",
        "lockstep_planner_waves",
        "lockstep_healthgate_verdicts_stored",
        "lockstep_updater_nodes",
        "lockstep_updater_open_wave_pushed_images",
        "lockstep_inventory_fleet_conformance_ratio",
        "lockstep_inventory_drifted_nodes",
        "lockstep_inventory_unreadable_bmcs",
    }
