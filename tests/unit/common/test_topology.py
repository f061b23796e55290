"""JetStream topology as code: stream and consumer configurations and the start-up diff."""

from __future__ import annotations

import dataclasses

import pytest
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from lockstep_common import topology
from lockstep_common.subjects import Namespace
from lockstep_common.topology import (
    ADVISORY_MAX_DELIVERIES,
    ADVISORY_TERMINATED,
    EVENT_STREAMS,
    ConsumerSpec,
    StreamPolicy,
    StreamSpec,
    advisory_stream,
    consumer_config,
    diff_config,
    stream_config,
)

from .nats_match import matches

pytestmark = pytest.mark.unit

NS = Namespace("staging")
POLICY = StreamPolicy(replicas=3, duplicate_window_s=900.0, max_msg_bytes=2 << 20)
# The fields the start-up self-check compares (ensure_topology uses these).
STREAM_FIELDS = topology._STREAM_FIELDS
CONSUMER_FIELDS = topology._CONSUMER_FIELDS


def _drift_stream() -> StreamConfig:
    spec = next(s for s in EVENT_STREAMS if s.base == "DRIFT")
    return stream_config(NS, spec, StreamPolicy())


def _consumer(**overrides: object) -> ConsumerConfig:
    spec = ConsumerSpec(
        durable="inventory-drift",
        stream="DRIFT",
        filter_subjects=("drift.detected.>",),
        max_deliver=5,
        redelivery_backoff_s=(1.0, 5.0),
    )
    return consumer_config(NS, dataclasses.replace(spec, **overrides))  # type: ignore[arg-type]


# --- streams ----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", EVENT_STREAMS, ids=lambda s: s.base)
def test_event_stream_config_follows_the_policy_and_the_namespace(spec: StreamSpec) -> None:
    config = stream_config(NS, spec, POLICY)

    assert config.name == f"STAGING_{spec.base}"
    assert config.storage is StorageType.FILE
    assert config.retention is RetentionPolicy.LIMITS
    assert config.num_replicas == 3
    assert config.duplicate_window == 900.0
    assert config.max_msg_size == 2 << 20
    assert (config.max_age, config.max_bytes) == (spec.max_age_s, spec.max_bytes)
    assert config.subjects == [f"staging.{s}" for s in spec.subjects]


def test_every_stream_has_finite_limits_and_configured_ones_replace_the_defaults() -> None:
    specs = [*EVENT_STREAMS, advisory_stream(NS)]
    assert all(0 < s.max_bytes <= 1 << 30 and s.max_age_s > 0 for s in specs)
    limits = topology.stream_limits(
        {"TELEMETRY": 7200.0}, {"PINS": 32 << 20}, duplicate_window_s=900.0, max_msg_bytes=1 << 20
    )
    policy = dataclasses.replace(POLICY, limits=limits)
    by_base = {s.base: stream_config(NS, s, policy) for s in specs}

    assert (by_base["TELEMETRY"].max_age, by_base["TELEMETRY"].max_bytes) == (7200.0, 1 << 30)
    assert (by_base["PINS"].max_age, by_base["PINS"].max_bytes) == (30 * topology.DAY, 32 << 20)
    assert by_base["ADVISORIES"].max_bytes == 64 << 20


def test_advisory_stream_config_is_durable_and_keeps_raw_advisory_subjects() -> None:
    config = stream_config(NS, advisory_stream(NS), POLICY)

    assert config.name == "STAGING_ADVISORIES"
    assert config.storage is StorageType.FILE
    assert config.retention is RetentionPolicy.LIMITS
    assert config.num_replicas == 3
    assert config.subjects
    assert all(s.startswith("$JS.EVENT.ADVISORY.CONSUMER.") for s in config.subjects)


def test_advisory_stream_covers_both_dlq_advisories_of_every_event_stream() -> None:
    patterns = advisory_stream(NS).subjects

    for spec in EVENT_STREAMS:
        for kind in (ADVISORY_MAX_DELIVERIES, ADVISORY_TERMINATED):
            advisory = f"{kind}.STAGING_{spec.base}.staging-some-consumer"
            assert any(matches(p, advisory) for p in patterns), advisory


def test_advisory_stream_ignores_other_namespaces_and_other_advisories() -> None:
    patterns = advisory_stream(NS).subjects
    other = Namespace("prod")
    foreign = [
        f"{kind}.{other.stream(spec.base)}.prod-consumer"
        for spec in EVENT_STREAMS
        for kind in (ADVISORY_MAX_DELIVERIES, ADVISORY_TERMINATED)
    ]
    foreign.append("$JS.EVENT.ADVISORY.CONSUMER.CREATED.STAGING_DRIFT.staging-some-consumer")

    assert [s for s in foreign if any(matches(p, s) for p in patterns)] == []


# --- consumers --------------------------------------------------------------------------------


def test_consumer_config_acks_explicitly_and_delivers_a_finite_number_of_times() -> None:
    config = _consumer()

    assert config.durable_name == "staging-inventory-drift"
    assert config.ack_policy is AckPolicy.EXPLICIT
    assert config.max_deliver == 5
    assert config.ack_wait == 30.0
    assert config.backoff == [1.0, 5.0]


def test_consumer_config_uses_filter_subject_for_one_filter() -> None:
    config = _consumer()

    assert config.filter_subject == "staging.drift.detected.>"
    assert config.filter_subjects is None


def test_consumer_config_uses_filter_subjects_for_several_filters() -> None:
    config = _consumer(filter_subjects=("drift.detected.>", "drift.resolved.>"))

    assert config.filter_subject is None
    assert config.filter_subjects == ["staging.drift.detected.>", "staging.drift.resolved.>"]


def test_consumer_config_leaves_raw_filters_alone() -> None:
    raw = f"{ADVISORY_MAX_DELIVERIES}.STAGING_DRIFT.*"

    config = _consumer(filter_subjects=(raw,), namespaced_filters=False)

    assert config.filter_subject == raw


def test_consumer_config_without_backoff_sends_none() -> None:
    assert _consumer(redelivery_backoff_s=()).backoff is None


# --- nak delays under a BackOff ----------------------------------------------------------------

DEFAULTS = ConsumerSpec(
    durable="inventory-drift",
    stream="DRIFT",
    filter_subjects=("drift.detected.>",),
    ack_wait_s=30.0,
    redelivery_backoff_s=(30.0, 60.0, 120.0, 300.0),
)


@pytest.mark.parametrize(
    ("delivery", "wait", "sent"),
    [
        # nats-server waits sent + BackOff[min(n-1, len-1)] - BackOff[0] (processNak and
        # checkPending in server/consumer.go): a plain nak(5) after delivery 2 took 35 s.
        (1, 1.0, 1.0),
        (2, 5.0, -25.0),
        (3, 15.0, -75.0),
        (4, 60.0, -210.0),
        (7, 60.0, -210.0),  # past the end of BackOff the server keeps its last entry
        (2, 30.0, 0.0),  # zero, not "no delay": a bare -NAK would be redelivered at once
        (0, 2.0, 2.0),
    ],
)
def test_nak_delay_takes_off_what_the_backoff_adds(delivery: int, wait: float, sent: float) -> None:
    assert DEFAULTS.nak_delay(delivery, wait) == sent


@pytest.mark.parametrize("delivery", [1, 2, 9])
def test_nak_delay_without_backoff_is_the_wait(delivery: int) -> None:
    assert dataclasses.replace(DEFAULTS, redelivery_backoff_s=()).nak_delay(delivery, 5.0) == 5.0


# --- the start-up diff ------------------------------------------------------------------------


def test_diff_reports_a_changed_duplicate_window() -> None:
    want = _drift_stream()
    have = dataclasses.replace(want, duplicate_window=120.0)

    assert diff_config(want, have, STREAM_FIELDS) == [
        "duplicate_window: declared 600.0, live 120.0"
    ]


def test_diff_reports_changed_subjects() -> None:
    want = _drift_stream()
    have = dataclasses.replace(want, subjects=["staging.drift.detected.>"])

    assert diff_config(want, have, STREAM_FIELDS) == [
        "subjects: declared ['staging.drift.>'], live ['staging.drift.detected.>']"
    ]


def test_diff_reports_a_changed_retention_by_its_value() -> None:
    want = _drift_stream()
    have = dataclasses.replace(want, retention=RetentionPolicy.WORK_QUEUE)

    assert diff_config(want, have, STREAM_FIELDS) == ["retention: declared limits, live workqueue"]


def test_diff_reports_a_consumer_that_redelivers_forever() -> None:
    want = _consumer()
    have = dataclasses.replace(want, max_deliver=-1)

    assert diff_config(want, have, CONSUMER_FIELDS) == ["max_deliver: declared 5, live -1"]


@pytest.mark.parametrize(
    ("live", "shown"),
    [(None, "None"), ([1.0, 6.0], "[1.0, 6.0]"), ([5.0, 1.0], "[5.0, 1.0]"), ([1.0], "[1.0]")],
)
def test_diff_reports_a_changed_backoff(live: list[float] | None, shown: str) -> None:
    want = _consumer()
    have = dataclasses.replace(want, backoff=live)

    assert diff_config(want, have, CONSUMER_FIELDS) == [
        f"backoff: declared [1.0, 5.0], live {shown}"
    ]


def test_diff_reports_every_difference_at_once() -> None:
    want = _drift_stream()
    have = dataclasses.replace(want, duplicate_window=120.0, num_replicas=3, max_age=60.0)

    assert [d.split(":")[0] for d in diff_config(want, have, STREAM_FIELDS)] == [
        "num_replicas",
        "duplicate_window",
    ]
    # Limits are settings: ensure_topology updates them instead of refusing to start.
    assert diff_config(want, have, topology._LIMIT_FIELDS) == [
        "max_age: declared 2592000.0, live 60.0"
    ]


def test_diff_of_equal_configs_is_empty() -> None:
    assert diff_config(_drift_stream(), _drift_stream(), STREAM_FIELDS) == []
    assert diff_config(_consumer(), _consumer(), CONSUMER_FIELDS) == []


def test_diff_ignores_float_rounding_and_subject_order() -> None:
    want = stream_config(NS, next(s for s in EVENT_STREAMS if s.base == "ROLLOUTS"), POLICY)
    assert want.subjects is not None
    assert want.duplicate_window is not None
    have = dataclasses.replace(
        want,
        duplicate_window=want.duplicate_window + 1e-7,
        subjects=list(reversed(want.subjects)),
    )

    assert diff_config(want, have, STREAM_FIELDS) == []


def test_diff_ignores_rounding_in_consumer_durations() -> None:
    want = _consumer()
    have = dataclasses.replace(want, ack_wait=30.0000001, backoff=[1.0000001, 5.0])

    assert diff_config(want, have, CONSUMER_FIELDS) == []


def test_diff_treats_no_backoff_and_an_empty_backoff_alike() -> None:
    want = _consumer(redelivery_backoff_s=())
    have = dataclasses.replace(want, backoff=[])

    assert diff_config(want, have, CONSUMER_FIELDS) == []


@pytest.mark.parametrize("spec", [*EVENT_STREAMS, advisory_stream(NS)], ids=lambda s: s.base)
def test_a_stream_read_back_from_the_server_format_matches_its_declaration(
    spec: StreamSpec,
) -> None:
    # The server speaks nanoseconds; nats-py converts both ways.
    want = stream_config(NS, spec, POLICY)

    have = StreamConfig.from_response(want.as_dict())

    assert diff_config(want, have, STREAM_FIELDS) == []


def test_a_consumer_read_back_from_the_server_format_matches_its_declaration() -> None:
    want = _consumer(filter_subjects=("drift.detected.>", "drift.resolved.>"))

    have = ConsumerConfig.from_response(want.as_dict())

    assert diff_config(want, have, CONSUMER_FIELDS) == []
