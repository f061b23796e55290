"""``HealthObserved`` reports as the judge's signals: one (metric, value) per reading.

The names are the ones the hard rules (:mod:`.hard_rules`) and the default policy read. A report
is mapped in full, so that every metric of the default policy has a row per report:

- gauges (busbw, SM clock, temperature, power) only when the report carries them: a missing gauge
  is no evidence, and the judge's "too little data" rule covers a node that never sends one;
- counters the policy treats as ``missing = "zero"`` (ECC, row remap, PCIe, NVLink CRC) as NaN
  when absent, so the policy's missing-value rule decides, not the agent's silence;
- ``throttled`` 1 when an active reason is a hardware slowdown or a thermal one (NVML's
  ``clocksThrottleReasons``: HW slowdown, HW/SW thermal slowdown, power brake), else 0: a power
  cap at full load is the normal state of a busy GPU, not a symptom;
- ``xid_<code>`` per reported code, and ``xid_nonfatal_count`` the sum outside the fatal set.
"""

from __future__ import annotations

import math
from collections.abc import Collection

from lockstep_common.events.v1 import HealthObserved
from lockstep_gate.hard_rules import (
    BUSBW,
    BUSBW_EXPECTED,
    DCGM_DIAG,
    DEVICE_FAILED,
    GSP_INIT,
    HEARTBEAT,
    XID_PREFIX,
)
from lockstep_gate.policy import Policy

SM_CLOCK = "sm_clock_mhz"
TEMPERATURE = "gpu_temperature_c"
POWER = "gpu_power_w"
THROTTLED = "throttled"
XID_NONFATAL = "xid_nonfatal_count"
ECC_SBE = "ecc_sbe_count"
ROW_REMAP = "row_remap_pending"
PCIE_REPLAY = "pcie_replay_count"
NVLINK_CRC = "nvlink_crc_error_count"

# Substrings of NVML throttle reason names that mean the GPU is held back by a fault or heat.
_SLOWDOWN_MARKS = ("hw_slowdown", "thermal", "power_brake")

Signal = tuple[str, float]


def throttled(reasons: Collection[str]) -> bool:
    """Whether any active reason is a hardware slowdown, thermal or power-brake one."""
    return any(mark in r.lower() for r in reasons for mark in _SLOWDOWN_MARKS)


def _gauge(out: list[Signal], metric: str, value: float | None) -> None:
    if value is not None:
        out.append((metric, float(value)))


def _counter(out: list[Signal], metric: str, value: int | None) -> None:
    out.append((metric, math.nan if value is None else float(value)))


def signals_of(report: HealthObserved, fatal_xids: Collection[int]) -> list[Signal]:
    """Every signal a report carries, in a fixed order."""
    out: list[Signal] = []
    if report.dcgm_passed is not None:
        out.append((DCGM_DIAG, 1.0 if report.dcgm_passed else 0.0))
    fatal = set(fatal_xids)
    nonfatal = 0
    for code, count in sorted(report.xid_counts.items(), key=lambda kv: int(kv[0])):
        out.append((f"{XID_PREFIX}{int(code)}", float(count)))
        if int(code) not in fatal:
            nonfatal += count
    out.append((XID_NONFATAL, float(nonfatal)))
    _gauge(out, BUSBW, report.nccl_busbw_gbps)
    _gauge(out, BUSBW_EXPECTED, report.nccl_expected_gbps)
    _gauge(out, SM_CLOCK, report.sm_clock_mhz)
    _gauge(out, TEMPERATURE, report.max_temperature_c)
    _gauge(out, POWER, report.gpu_power_w)
    out.append((THROTTLED, 1.0 if throttled(report.throttle_reasons) else 0.0))
    _counter(out, ECC_SBE, report.ecc_sbe_count)
    _counter(out, ROW_REMAP, report.row_remap_pending)
    _counter(out, PCIE_REPLAY, report.pcie_replay_count)
    _counter(out, NVLINK_CRC, report.nvlink_crc_error_count)
    if report.gsp_init_failed is not None:
        out.append((GSP_INIT, 1.0 if report.gsp_init_failed else 0.0))
    if report.heartbeat is not None:
        out.append((HEARTBEAT, float(report.heartbeat)))
    return out


def may_break_hard_rule(signals: Collection[Signal], policy: Policy) -> bool:
    """Whether one report alone could break a hard rule, so the rules must be checked now.

    busbw counts against the report's own expected value, else the lowest expected value the
    policy gives any stratum (a cheap pre-filter: the rules themselves decide)."""
    values = dict(signals)
    if values.get(DCGM_DIAG) == 0.0 or values.get(GSP_INIT, 0.0) > 0:
        return True
    if values.get(DEVICE_FAILED, 0.0) > 0:
        return True
    if any(values.get(f"{XID_PREFIX}{code}", 0.0) > 0 for code in policy.hard_rules.fatal_xids):
        return True
    busbw = values.get(BUSBW)
    if busbw is None:
        return False
    expected = values.get(BUSBW_EXPECTED)
    if expected is None:
        fallback = [e[BUSBW] for e in policy.expected.values() if BUSBW in e]
        expected = min(fallback) if fallback else None
    return expected is not None and busbw < expected * policy.hard_rules.busbw_factor
