"""The metric names the code exports and the ones a PromQL expression reads.

Exported names are found two ways that must agree: a scan of every ``Counter(``, ``Gauge(``,
``Histogram(``, ``Summary(`` and ``QueryGauge(`` in the libraries' and services' sources (which
also sees gauges a service builds inline, like attest's), and the registries the shared runtime,
the inventory and the query gauges really build.
"""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from lockstep_common.observability import Metrics
from lockstep_common.query_gauges import RUNTIME_GAUGES
from lockstep_healthgate.adapters.gauges import GAUGES as HEALTHGATE
from lockstep_inventory.fleet_metrics import FleetGauges
from lockstep_planner.adapters.gauges import GAUGES as PLANNER
from lockstep_updater.adapters.gauges import GAUGES as UPDATER

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [*ROOT.glob("libs/*/src/**/*.py"), *ROOT.glob("services/*/src/**/*.py")]

# Families prometheus_client's process, platform and GC collectors add to every registry.
CLIENT_COLLECTED = ("process_", "python_")
# Series Prometheus itself adds to every scrape (prometheus.io/docs "Jobs and instances").
PROMETHEUS_OWN = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})

_DECLARED = re.compile(
    r"\b(Counter|Gauge|Histogram|Summary|QueryGauge)\(\s*\"([a-zA-Z_:][a-zA-Z0-9_:]*)\""
)
_SUFFIXES = {
    "Counter": ("", "_created"),
    "Gauge": ("",),
    "QueryGauge": ("",),
    "Histogram": ("_bucket", "_sum", "_count", "_created"),
    "Summary": ("_sum", "_count", "_created"),
}


def declared() -> frozenset[str]:
    """Every series name a metric declared in the sources exposes."""
    names: set[str] = set()
    for path in SOURCES:
        for kind, name in _DECLARED.findall(path.read_text()):
            names.update(name + suffix for suffix in _SUFFIXES[kind])
    return frozenset(names)


def registered() -> frozenset[str]:
    """Metric family names the runtime and services really register."""
    metrics = Metrics("any")
    FleetGauges(metrics.registry)
    registry: CollectorRegistry = metrics.registry
    # prometheus_client names a counter's family without its _total, a histogram's without
    # its _bucket/_sum/_count.
    exposed = {"counter": "_total", "histogram": "_count", "gauge": ""}
    # prometheus_client's own process_* and python_* collectors are not declared in our sources.
    ours = [f for f in registry.collect() if not f.name.startswith(CLIENT_COLLECTED)]
    names = {f.name + exposed[f.type] for f in ours}
    names |= {g.name for g in (*RUNTIME_GAUGES, *PLANNER, *UPDATER, *HEALTHGATE)}
    return frozenset(names)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", re.IGNORECASE
)
_TOKEN = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "inf", "nan"}
    | {"group_left", "group_right", "atan2"}
)


def referenced(expr: str) -> frozenset[str]:
    """The metric names a PromQL expression selects (functions, keywords, label names and
    values, durations and numbers aside)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    return frozenset(t for t in _TOKEN.findall(text) if t.lower() not in _KEYWORDS)
