"""Service settings: shared and per-service environment variables, keywords, and refusals."""

from __future__ import annotations

import os
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsConfigDict

from lockstep_common.settings import ServiceSettings, explain
from lockstep_common.topology import EVENT_STREAMS, StreamLimits

pytestmark = pytest.mark.unit


class UnitSettings(ServiceSettings):
    """A service of its own, as every Lockstep service declares one."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_UNITTEST_", extra="forbid", populate_by_name=True
    )

    flavour: str = "plain"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LOCKSTEP_* (or look-alike) variable from the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.upper().startswith("LOCKSTEP_") or name.upper() in {
            "NATS_URL",
            "DATABASE_URL",
            "NAMESPACE",
            "FLAVOUR",
        }:
            monkeypatch.delenv(name)


def test_defaults_need_no_environment() -> None:
    settings = UnitSettings()

    assert settings.nats_url == "nats://127.0.0.1:4222"
    assert settings.namespace == "lockstep"
    assert settings.flavour == "plain"
    assert settings.duplicate_window_s > settings.relay_retry_horizon_s


def test_shared_connection_settings_come_from_lockstep_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCKSTEP_NATS_URL", "nats://bus-1:4222,nats://bus-2:4222")
    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://lockstep@db:5432/fleet")
    monkeypatch.setenv("LOCKSTEP_NAMESPACE", "staging")

    settings = UnitSettings()

    assert settings.nats_url == "nats://bus-1:4222,nats://bus-2:4222"
    assert settings.database_url == "postgresql://lockstep@db:5432/fleet"
    assert settings.namespace == "staging"


def test_service_settings_come_from_the_service_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_UNITTEST_FLAVOUR", "spicy")
    monkeypatch.setenv("LOCKSTEP_UNITTEST_CONSUMER_MAX_DELIVER", "7")
    monkeypatch.setenv("LOCKSTEP_UNITTEST_CONSUMER_RETRY_BACKOFF_S", "[2, 4]")

    settings = UnitSettings()

    assert settings.flavour == "spicy"
    assert settings.consumer_max_deliver == 7
    assert settings.consumer_retry_backoff_s == (2.0, 4.0)


def test_another_services_prefix_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_OTHER_FLAVOUR", "spicy")
    monkeypatch.setenv("FLAVOUR", "spicy")

    assert UnitSettings().flavour == "plain"


@pytest.mark.parametrize(
    ("variable", "field", "shape"),
    [
        ("NATS_URL", "nats_url", "nats://{}:4222"),
        ("DATABASE_URL", "database_url", "postgresql://{}@db/lockstep"),
        ("NAMESPACE", "namespace", "{}"),
    ],
)
def test_unprefixed_platform_variables_are_ignored(
    monkeypatch: pytest.MonkeyPatch, variable: str, field: str, shape: str
) -> None:
    # Kubernetes sets NAMESPACE, PaaS platforms DATABASE_URL: neither may redirect Lockstep.
    monkeypatch.setenv(variable, shape.format("someone-elses"))
    assert getattr(UnitSettings(), field) != shape.format("someone-elses")

    monkeypatch.setenv(f"LOCKSTEP_{variable}", shape.format("ours"))
    assert getattr(UnitSettings(), field) == shape.format("ours")


def test_keyword_arguments_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_NATS_URL", "nats://from-env:4222")
    monkeypatch.setenv("LOCKSTEP_NAMESPACE", "from-env")
    monkeypatch.setenv("LOCKSTEP_UNITTEST_FLAVOUR", "from-env")

    settings = UnitSettings(nats_url="nats://kw:4222", namespace="kw", flavour="kw")

    assert settings.nats_url == "nats://kw:4222"
    assert settings.namespace == "kw"
    assert settings.flavour == "kw"


@pytest.mark.parametrize(("window", "horizon"), [(300.0, 300.0), (120.0, 300.0)])
def test_duplicate_window_not_above_the_relay_retry_horizon_is_refused(
    window: float, horizon: float
) -> None:
    with pytest.raises(ValidationError) as caught:
        UnitSettings(duplicate_window_s=window, relay_retry_horizon_s=horizon)

    message = str(caught.value)
    assert f"duplicate_window_s ({window})" in message
    assert f"relay_retry_horizon_s ({horizon})" in message


def test_duplicate_window_just_above_the_relay_retry_horizon_is_accepted() -> None:
    settings = UnitSettings(duplicate_window_s=300.5, relay_retry_horizon_s=300.0)

    assert settings.duplicate_window_s == 300.5


def test_duplicate_window_check_applies_to_environment_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCKSTEP_UNITTEST_DUPLICATE_WINDOW_S", "60")

    with pytest.raises(ValidationError, match="duplicate_window_s"):
        UnitSettings()


@pytest.mark.parametrize("bad", ["a.b", "a b", "prod.>", ""])
def test_namespace_that_cannot_be_a_subject_token_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match=r"namespace .* cannot be a NATS subject token"):
        UnitSettings(namespace=bad)


def test_namespace_from_the_environment_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_NAMESPACE", "a.b")

    with pytest.raises(ValidationError, match=r"namespace 'a\.b'"):
        UnitSettings()


def test_unknown_keyword_is_refused() -> None:
    with pytest.raises(ValidationError, match="nats_ulr"):
        UnitSettings(nats_ulr="nats://typo:4222")  # type: ignore[call-arg]


def test_pool_max_below_pool_min_is_refused() -> None:
    with pytest.raises(ValidationError, match="db_pool_max must be >= db_pool_min"):
        UnitSettings(db_pool_min=4, db_pool_max=2)


def test_db_schema_with_punctuation_is_refused() -> None:
    with pytest.raises(ValidationError, match="db_schema"):
        UnitSettings(db_schema="inventory; drop")


def test_redelivery_backoff_must_fit_jetstream_rules() -> None:
    with pytest.raises(ValidationError, match="needs fewer than consumer_max_deliver"):
        UnitSettings(consumer_max_deliver=3, consumer_redelivery_backoff_s=(30.0, 60.0, 90.0))
    with pytest.raises(ValidationError, match="differs from consumer_ack_wait_s"):
        UnitSettings(consumer_ack_wait_s=30.0, consumer_redelivery_backoff_s=(5.0,))
    # A longer BackOff[0] would be the live AckWait, and the self-check refuse the next start.
    with pytest.raises(ValidationError, match="differs from consumer_ack_wait_s"):
        UnitSettings(consumer_ack_wait_s=30.0, consumer_redelivery_backoff_s=(60.0,))
    assert UnitSettings(consumer_ack_wait_s=5.0, consumer_redelivery_backoff_s=(5.0, 10.0))


def test_an_inbox_that_forgets_before_the_streams_do_is_refused() -> None:
    # A replay of an event still stored in a stream would meet an inbox that forgot it.
    with pytest.raises(ValidationError, match=r"inbox_retention_s \(86400\) must exceed"):
        UnitSettings(inbox_retention_s=86_400.0)
    # ... also when a stream is configured to keep its events longer than the default.
    with pytest.raises(ValidationError, match=r"longest stream max age \(5184000 s\)"):
        UnitSettings(stream_max_age_s={"PINS": 60 * 86_400.0})
    assert UnitSettings(inbox_retention_s=2 * 86_400.0, stream_max_age_s=ALL_ONE_DAY)


ALL_ONE_DAY = {s.base: 86_400.0 for s in EVENT_STREAMS}


def test_stream_limits_come_from_shared_variables_and_override_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCKSTEP_STREAM_MAX_AGE_S", '{"TELEMETRY": 7200}')
    monkeypatch.setenv("LOCKSTEP_STREAM_MAX_BYTES", '{"TELEMETRY": 4294967296, "DLQ": 67108864}')

    policy = UnitSettings().stream_policy()

    assert policy.limits is not None
    assert policy.limits["TELEMETRY"] == StreamLimits(7200.0, 4 << 30)
    assert policy.limits["DLQ"] == StreamLimits(30 * 86_400.0, 64 << 20)
    assert policy.limits["PINS"] == StreamLimits(30 * 86_400.0, 256 << 20)  # the default
    assert policy.limits["ADVISORIES"] == StreamLimits(7 * 86_400.0, 64 << 20)
    assert set(policy.limits) == {*(s.base for s in EVENT_STREAMS), "ADVISORIES"}


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (
            {"stream_max_age_s": {"TELEMTRY": 7200}},
            "stream_max_age_s names no such stream: TELEMTRY",
        ),
        ({"stream_max_bytes": {"pins": 1 << 30}}, "stream_max_bytes names no such stream: pins"),
        ({"stream_max_age_s": {"DLQ": 60}}, "stream_max_age_s DLQ: 60 s is outside 3600 s"),
        ({"stream_max_age_s": {"DLQ": 0}}, "stream_max_age_s DLQ: 0 s is outside"),
        ({"stream_max_age_s": {"DLQ": 400 * 86_400}}, "to 3.16224e\\+07 s \\(a year\\)"),
        (
            {"duplicate_window_s": 7200.0, "stream_max_age_s": {"TELEMETRY": 3600}},
            "TELEMETRY: 3600 s is outside 7200 s",
        ),
        ({"stream_max_bytes": {"PINS": -1}}, "stream_max_bytes PINS: -1 is outside 16777216"),
        ({"stream_max_bytes": {"PINS": 1 << 20}}, "PINS: 1048576 is outside 16777216"),
        ({"stream_max_bytes": {"PINS": 1 << 41}}, "to 1099511627776 \\(1 TiB\\)"),
        (
            {"stream_max_message_bytes": 8 << 20, "stream_max_bytes": {"GATES": 64 << 20}},
            "GATES: 67108864 is outside 134217728 \\(16 messages",
        ),
    ],
)
def test_stream_limits_out_of_bounds_are_refused(overrides: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        UnitSettings(**overrides)


def test_a_bad_stream_limit_variable_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCKSTEP_STREAM_MAX_BYTES", '{"PINS": "lots"}')
    with pytest.raises(ValidationError) as caught:
        UnitSettings()
    assert explain(UnitSettings, caught.value).startswith("LOCKSTEP_STREAM_MAX_BYTES.PINS:")
