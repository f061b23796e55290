"""Gauges read by SQL: what a scrape shows before, after and between refreshes."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from lockstep_common.query_gauges import QueryGauge, QueryGauges

pytestmark = pytest.mark.unit

STEPS = QueryGauge(
    "t_nodes", "Nodes by step", "SELECT step", labels=("step",), fill=(("a",), ("b",))
)
LAG = QueryGauge("t_lag_seconds", "Lag", "SELECT lag")


class Conn:
    """Answers each query with the rows given for it, or raises what is given."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers

    async def fetch(self, query: str) -> list[Any]:
        answer = self.answers[query]
        if isinstance(answer, Exception):
            raise answer
        return list(answer)


def scrape(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


async def test_nothing_is_exposed_until_the_first_refresh_then_the_rows_with_zeros_filled() -> None:
    registry = CollectorRegistry()
    gauges = QueryGauges(registry, [STEPS, LAG])
    assert "t_nodes{" not in scrape(registry)  # never a false 0 right after a restart
    assert "t_lag_seconds " not in scrape(registry)

    await gauges.refresh(Conn({"SELECT step": [("b", 3), ("c", 1)], "SELECT lag": [(None,)]}))

    text = scrape(registry)
    assert 't_nodes{step="a"} 0.0' in text
    assert 't_nodes{step="b"} 3.0' in text
    assert 't_nodes{step="c"} 1.0' in text
    assert "t_lag_seconds 0.0" in text  # NULL (no pending row) reads as 0


async def test_a_label_set_no_longer_returned_disappears_unless_filled() -> None:
    registry = CollectorRegistry()
    gauges = QueryGauges(registry, [STEPS])
    await gauges.refresh(Conn({"SELECT step": [("a", 2), ("c", 1)]}))
    await gauges.refresh(Conn({"SELECT step": []}))
    text = scrape(registry)
    assert 't_nodes{step="a"} 0.0' in text
    assert 'step="c"' not in text


async def test_a_failing_query_keeps_its_last_samples_and_the_others_refresh() -> None:
    registry = CollectorRegistry()
    gauges = QueryGauges(registry, [STEPS, LAG])
    await gauges.refresh(Conn({"SELECT step": [("a", 2)], "SELECT lag": [(5.0,)]}))
    broken = asyncpg.UndefinedTableError("relation does not exist")
    await gauges.refresh(Conn({"SELECT step": broken, "SELECT lag": [(9.0,)]}))
    text = scrape(registry)
    assert 't_nodes{step="a"} 2.0' in text
    assert "t_lag_seconds 9.0" in text


def test_a_row_of_the_wrong_width_is_named() -> None:
    gauges = QueryGauges(CollectorRegistry(), [STEPS])
    with pytest.raises(ValueError, match="t_nodes: a row has 3 columns, not 2"):
        gauges.apply(STEPS, [("a", "b", 1)])


def test_two_collectors_may_not_declare_the_same_name() -> None:
    registry = CollectorRegistry()
    QueryGauges(registry, [LAG])
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        QueryGauges(registry, [LAG])
