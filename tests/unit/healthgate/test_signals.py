"""HealthObserved reports as the judge's signals, and the pre-filter for the hard rules."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from lockstep_common.events.v1 import HealthObserved
from lockstep_gate.policy_files import default_policy
from lockstep_healthgate.domain.signals import may_break_hard_rule, signals_of, throttled

pytestmark = pytest.mark.unit
AT = datetime(2026, 1, 1, tzinfo=UTC)
FATAL = default_policy().hard_rules.fatal_xids


def _report(**fields: object) -> HealthObserved:
    return HealthObserved.model_validate(
        {"node_id": "n1", "site": "s", "observed_at": AT, **fields}
    )


def test_a_full_report_maps_every_field_to_the_policy_names() -> None:
    full = _report(
        dcgm_level=3,
        dcgm_passed=False,
        xid_counts={"79": 1, "13": 2, "31": 1},
        nccl_busbw_gbps=350.0,
        nccl_expected_gbps=370.0,
        sm_clock_mhz=1900.0,
        throttle_reasons=("hw_thermal_slowdown",),
        max_temperature_c=70.5,
        heartbeat=42,
        gpu_power_w=990.0,
        ecc_sbe_count=3,
        row_remap_pending=1,
        pcie_replay_count=4,
        nvlink_crc_error_count=5,
        gsp_init_failed=True,
    )
    assert dict(signals_of(full, FATAL)) == {
        "dcgm_diag_passed": 0.0,
        "xid_13": 2.0,
        "xid_31": 1.0,
        "xid_79": 1.0,
        "xid_nonfatal_count": 3.0,  # 13 and 31 are outside the fatal set, 79 is in it
        "nccl_busbw_gbps": 350.0,
        "nccl_expected_gbps": 370.0,
        "sm_clock_mhz": 1900.0,
        "gpu_temperature_c": 70.5,
        "gpu_power_w": 990.0,
        "throttled": 1.0,
        "ecc_sbe_count": 3.0,
        "row_remap_pending": 1.0,
        "pcie_replay_count": 4.0,
        "nvlink_crc_error_count": 5.0,
        "gsp_init_failed": 1.0,
        "heartbeat": 42.0,
    }


def test_missing_gauges_are_absent_and_missing_counters_are_nan_for_the_policy_rule() -> None:
    values = dict(signals_of(_report(), FATAL))
    for gauge in ("nccl_busbw_gbps", "sm_clock_mhz", "gpu_temperature_c", "gpu_power_w"):
        assert gauge not in values
    for counter in ("ecc_sbe_count", "row_remap_pending", "pcie_replay_count"):
        assert math.isnan(values[counter])
    assert values["xid_nonfatal_count"] == 0.0  # no XIDs reported is a count of zero
    assert values["throttled"] == 0.0
    assert "dcgm_diag_passed" not in values and "heartbeat" not in values


@pytest.mark.parametrize(
    ("reasons", "expected"),
    [
        ((), False),
        (("sw_power_cap",), False),  # a power cap at full load is a busy GPU, not a symptom
        (("gpu_idle",), False),
        (("hw_slowdown",), True),
        (("sw_thermal_slowdown",), True),
        (("HW_POWER_BRAKE_SLOWDOWN",), True),
    ],
)
def test_throttled_counts_hardware_and_thermal_slowdowns_only(
    reasons: tuple[str, ...], expected: bool
) -> None:
    assert throttled(reasons) is expected


@pytest.mark.parametrize(
    ("fields", "suspect"),
    [
        ({"dcgm_passed": True, "nccl_busbw_gbps": 360.0, "nccl_expected_gbps": 370.0}, False),
        ({"dcgm_passed": False}, True),
        ({"xid_counts": {"79": 1}}, True),
        ({"xid_counts": {"13": 5}}, False),
        ({"gsp_init_failed": True}, True),
        ({"nccl_busbw_gbps": 300.0, "nccl_expected_gbps": 370.0}, True),  # under 0.92 x 370
        ({"nccl_busbw_gbps": 341.0, "nccl_expected_gbps": 370.0}, False),  # 340.4 is the bar
        ({"nccl_busbw_gbps": 10.0}, False),  # no expected value anywhere: the rules decide
    ],
)
def test_a_report_that_could_break_a_hard_rule_is_a_suspect(
    fields: dict[str, object], suspect: bool
) -> None:
    signals = signals_of(_report(**fields), FATAL)
    assert may_break_hard_rule(signals, default_policy()) is suspect


def test_the_policy_expected_busbw_is_the_fallback_bar() -> None:
    policy = default_policy().model_copy(update={"expected": {"gb200": {"nccl_busbw_gbps": 370.0}}})
    signals = signals_of(_report(nccl_busbw_gbps=300.0), FATAL)
    assert may_break_hard_rule(signals, policy)
