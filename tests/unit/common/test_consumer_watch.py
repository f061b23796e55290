"""The MaxAckPending stall detector's verdict and what it exports (reliability.md 7, A7)."""

from __future__ import annotations

import logging

import pytest

from lockstep_common.consumer_watch import AckCounts, ConsumerWatch, Watched
from lockstep_common.observability import Metrics

pytestmark = pytest.mark.unit

C = Watched("LOCKSTEP_BUNDLES", "lockstep-planner-bundles")


@pytest.mark.parametrize(
    ("ack_pending", "max_ack_pending", "pending", "stalled"),
    [
        (8, 8, 5, True),  # at the limit with more waiting: the server delivers nothing
        (8, 8, 0, False),  # at the limit with nothing waiting: nothing is held back
        (7, 8, 5, False),  # one slot free: delivery goes on
        (0, 0, 5, False),  # no limit reported (an unreadable info): never a stall
        (9, 8, 1, True),  # over (the limit lowered under a live consumer)
    ],
)
def test_a_consumer_is_stalled_only_at_its_limit_with_messages_waiting(
    ack_pending: int, max_ack_pending: int, pending: int, stalled: bool
) -> None:
    assert AckCounts(ack_pending, max_ack_pending, pending).stalled is stalled


def value(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"consumer": C.durable})


def test_the_counts_are_exported_and_a_stall_is_logged_once_and_its_end_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics("planner")
    watch = ConsumerWatch([C], metrics, interval_s=15.0)
    caplog.set_level(logging.INFO, logger="lockstep_common.consumer_watch")
    watch.record(C, AckCounts(8, 8, 40))
    watch.record(C, AckCounts(8, 8, 39))
    assert value(metrics, "lockstep_consumer_stalled") == 1
    assert value(metrics, "lockstep_consumer_ack_pending") == 8
    assert value(metrics, "lockstep_consumer_max_ack_pending") == 8
    assert value(metrics, "lockstep_consumer_pending") == 39
    stalls = [r for r in caplog.records if "stalled" in r.getMessage()]
    assert len(stalls) == 1 and stalls[0].levelno == logging.WARNING
    watch.record(C, AckCounts(2, 8, 0))
    assert value(metrics, "lockstep_consumer_stalled") == 0
    assert any("delivers again" in r.getMessage() for r in caplog.records)
