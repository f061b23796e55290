"""The configuration lint of a scaled-out stack (reliability.md 7, A6, the parts that need no
server): with the environment ``lockstep up --nats-cluster 3`` gives every service, each
service's declared streams are R3 file streams with a duplicate window beyond the relay's
retry horizon, and each consumer is durable, explicit-ack, finite in deliveries, backed off
(events; the DLQ advisory watcher redelivers after its AckWait), and inherits the stream's three
replicas. A single server keeps R1."""

from __future__ import annotations

import pytest
from nats.js.api import AckPolicy, StorageType

from lockstep_cli.supervisor import SCALED_OUT, SERVICES, STREAM_REPLICAS_VAR, service_app
from lockstep_common.service import ServiceApp
from lockstep_common.topology import (
    EVENT_STREAMS,
    advisory_stream,
    consumer_config,
    stream_config,
)

pytestmark = pytest.mark.unit


def apps(env: dict[str, str]) -> list[ServiceApp]:
    return [service_app(name, env) for name in SERVICES]


@pytest.mark.parametrize("name", SERVICES)
def test_every_stream_of_a_cluster_stack_is_r3_file_storage(name: str) -> None:
    (app,) = [service_app(name, {STREAM_REPLICAS_VAR: "3"})]
    policy = app.settings.stream_policy()
    for spec in (*EVENT_STREAMS, advisory_stream(app.namespace)):
        config = stream_config(app.namespace, spec, policy)
        assert config.num_replicas == 3, (name, spec.base)
        assert config.storage is StorageType.FILE, (name, spec.base)
        assert config.duplicate_window is not None
        assert config.duplicate_window > app.settings.relay_retry_horizon_s, (name, spec.base)


@pytest.mark.parametrize("name", SERVICES)
def test_every_consumer_of_a_cluster_stack_is_durable_explicit_finite_and_replicated(
    name: str,
) -> None:
    app = service_app(name, {STREAM_REPLICAS_VAR: "3"})
    for spec in app.consumer_specs():
        config = consumer_config(app.namespace, spec)
        assert config.durable_name, spec
        assert config.ack_policy is AckPolicy.EXPLICIT, spec
        assert config.max_deliver is not None and 1 < config.max_deliver < 100, spec
        if spec.stream != "ADVISORIES":  # the DLQ watcher redelivers every AckWait
            assert config.backoff, spec
        # Unset: nats-server gives a consumer its stream's replicas, three here.
        assert config.num_replicas in (None, 0), spec


def test_a_single_server_stack_keeps_one_replica() -> None:
    for app in apps({}):
        assert app.settings.stream_policy().replicas == 1, app.name


def test_stream_replicas_is_one_shared_setting_no_service_can_differ_on() -> None:
    # Each service checks the live streams against its own policy at start: one variable
    # for all of them, or one service with another count would refuse to run.
    assert {a.settings.stream_policy().replicas for a in apps({STREAM_REPLICAS_VAR: "3"})} == {3}


def test_scaled_out_runs_two_of_each_lease_fenced_service_and_one_of_the_rest() -> None:
    assert dict(SCALED_OUT) == {"updater": 2, "healthgate": 2}
    assert set(SCALED_OUT) <= set(SERVICES)
