"""Health reports for tests and benchmarks: a healthy GB200 node's readings with noise, and the
faults the hard rules and the judge must catch (seed 001: ~370 GB/s busbw on a 400G fabric)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime

from lockstep_common.events.v1 import HealthObserved

EXPECTED_BUSBW_GBPS = 370.0


@dataclass(frozen=True, slots=True)
class Fault:
    """What is wrong with a node (nothing by default)."""

    busbw_ratio: float = 1.0  # of the healthy value
    dcgm_failed: bool = False
    xids: dict[str, int] = field(default_factory=dict)
    gsp_init_failed: bool = False


HEALTHY = Fault()


def report(
    node_id: str,
    at: datetime,
    heartbeat: int,
    rng: random.Random,
    *,
    site: str = "site-a",
    fault: Fault = HEALTHY,
) -> HealthObserved:
    """One report of every signal the default policy reads."""
    return HealthObserved(
        node_id=node_id,
        site=site,
        observed_at=at,
        dcgm_level=1,
        dcgm_passed=not fault.dcgm_failed,
        xid_counts=dict(fault.xids),
        nccl_busbw_gbps=round(rng.gauss(362.0, 2.0) * fault.busbw_ratio, 2),
        nccl_expected_gbps=EXPECTED_BUSBW_GBPS,
        sm_clock_mhz=round(rng.gauss(1900.0, 10.0), 1),
        throttle_reasons=(),
        max_temperature_c=round(rng.gauss(65.0, 1.0), 1),
        heartbeat=heartbeat,
        gpu_power_w=round(rng.gauss(1000.0, 10.0), 1),
        ecc_sbe_count=0,
        row_remap_pending=0,
        pcie_replay_count=0,
        nvlink_crc_error_count=0,
        gsp_init_failed=fault.gsp_init_failed,
    )
