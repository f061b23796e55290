"""What the alerts and the dashboard read is on the services' real /metrics endpoints: the five
services started on real servers and scraped, and every metric name the rules and panels use
found there (Prometheus' own ``up`` aside)."""

from __future__ import annotations

import asyncio
import functools
import json
import re
from typing import Any

import pytest
import yaml

from lockstep_cli.polling import until
from lockstep_common.service import ServiceApp
from tests.integration.test_services import SERVICES, build, get
from tests.unit.ops.metric_names import PROMETHEUS_OWN, ROOT, referenced

pytestmark = pytest.mark.integration

_TYPE = re.compile(r"^# TYPE (\S+) (\w+)$", re.MULTILINE)
_SERIES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}

# Families that appear only after the service read its tables once (lockstep_common.query_gauges).
READ_FROM_TABLES = {
    "planner": "lockstep_planner_waves",
    "updater": "lockstep_updater_nodes",
    "healthgate": "lockstep_healthgate_verdicts_stored",
    "inventory": "lockstep_outbox_oldest_pending_age_seconds",
    "attest": "lockstep_dead_letters_stored",
}


def exposed(text: str) -> set[str]:
    """Series names a scrape of this exposition can return."""
    return {
        name + suffix for name, kind in _TYPE.findall(text) for suffix in _SERIES.get(kind, ("",))
    }


def used() -> set[str]:
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    top = json.loads((ROOT / "deploy" / "grafana" / "lockstep.json").read_text())["panels"]
    panels = [p for panel in top for p in (panel, *panel.get("panels", []))]
    exprs += [t["expr"] for p in panels for t in p.get("targets", [])]
    return {name for e in exprs for name in referenced(e)} - PROMETHEUS_OWN


async def scrape(app: ServiceApp, family: str) -> str | None:
    status, text = await asyncio.to_thread(get, app.require().http_port, "/metrics")
    return text if status == 200 and f"# TYPE {family} " in text else None


async def test_every_metric_the_alerts_and_the_dashboard_read_is_served(
    servers: Any, namespace: str
) -> None:
    apps = [build(name, servers, namespace) for name in SERVICES]
    names: set[str] = set()
    try:
        for app in apps:
            await app.start()
        for app in apps:
            family = READ_FROM_TABLES[app.name]
            text = await until(functools.partial(scrape, app, family), f"{app.name}: {family}")
            names |= exposed(text)
    finally:
        for app in apps:
            await app.stop()
    assert used() - names == set()
