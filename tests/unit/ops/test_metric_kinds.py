"""Every service exposes its process's own metrics, and a gauge is not named like a counter
(issue 31: ``lockstep_updater_pushes_sent`` and ``lockstep_healthgate_verdicts`` read as
counts of events, where they are levels read from tables)."""

from __future__ import annotations

import sys

import pytest
from prometheus_client.exposition import generate_latest

from lockstep_common.observability import Metrics
from tests.unit.ops.metric_names import registered

pytestmark = pytest.mark.unit
# Name endings that say "how many times something happened": a counter's (with _total), or an
# event noun or past participle that a reader would rate() over.
COUNTER_LIKE = ("_total", "_sent", "_verdicts", "_pushes", "_created")


@pytest.mark.skipif(sys.platform != "linux", reason="process metrics are read from /proc")
def test_a_service_exposes_its_process_metrics() -> None:
    text = generate_latest(Metrics("planner").registry).decode()
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_open_fds", "process_start_time_seconds", "python_info"):  # fmt: skip
        assert f"\n{name}" in text or text.startswith(name), name


def test_no_gauge_is_named_like_a_counter() -> None:
    registry = Metrics("any").registry
    gauges = {f.name for f in registry.collect() if f.type == "gauge"}
    table_gauges = {n for n in registered() if not n.endswith(("_total", "_count"))}
    named_like_counters = sorted(
        n for n in gauges | table_gauges if n.startswith("lockstep_") and n.endswith(COUNTER_LIKE)
    )
    assert named_like_counters == []
