"""``lockstep bench update`` on a tiny wave: the figures the issue asks for, with their raw
inputs beside them."""

from __future__ import annotations

import asyncio
import json
import statistics

import pytest

from lockstep_bench.update import PUSH_ROUNDS
from tests.integration.updater.test_updater_service import lockstep

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("dialect", ["lockstep", "nvidia-gb200-nvl"])
async def test_bench_update_reports_makespan_halt_latency_and_push_throughput(
    dialect: str,
) -> None:
    code, out = await asyncio.to_thread(
        lockstep, "bench", "update", "--nodes", "3", "--budget", "1", "--workers", "3",
        "--time-scale", "0.002", "--dialect", dialect, "--json",
    )  # fmt: skip
    assert code == 0, out
    result = json.loads(out)
    assert result["dialect"] == dialect
    assert result["states"] == {"done": 3}
    assert result["halted_states"] == {"cancelled": 3}  # nothing activated after the halt
    assert result["makespan_s"] >= result["bound_s"] > 0
    assert result["makespan_ratio"] == pytest.approx(
        result["makespan_s"] / result["bound_s"], abs=0.01
    )
    assert 0 <= result["halt_s"] <= 1.0
    library, raw = result["push_rounds"]["library"], result["push_rounds"]["raw"]
    assert len(library) == len(raw) == PUSH_ROUNDS and min(library + raw) > 0
    assert result["push_library_mb_s"] == statistics.median(library)
    assert result["push_raw_mb_s"] == statistics.median(raw)
    assert result["push_ratio"] == pytest.approx(
        result["push_library_mb_s"] / result["push_raw_mb_s"], abs=0.01
    )
    assert result["push_image_bytes"] > 4 * 1024 * 1024  # a PLDM package around a 4 MiB image


async def test_bench_update_refuses_an_unknown_dialect_naming_the_known() -> None:
    code, out = await asyncio.to_thread(lockstep, "bench", "update", "--dialect", "idrac")
    assert code != 0
    assert "unknown dialect 'idrac'" in out and "nvidia-gb200-nvl" in out
