"""Stage/activate durations per component class follow the seeds (minutes of real BMC time)."""

from __future__ import annotations

import pytest

from lockstep_sim.profiles import GB200, HGX_H100

pytestmark = pytest.mark.unit


def test_gpu_firmware_stages_for_about_fifteen_minutes() -> None:
    for profile in (GB200, HGX_H100):
        gpu = next(c for c in profile if c.kind == "gpu")
        assert gpu.stage_minutes == 15  # seed 000: "~15 min stage + reset"
        assert 2 <= gpu.activate_minutes <= 10  # "several more minutes to activate"


def test_bmc_resets_itself_and_psu_is_a_one_way_long_pole() -> None:
    for profile in (GB200, HGX_H100):
        bmc = next(c for c in profile if c.kind == "bmc")
        assert 2 <= bmc.activate_minutes <= 10  # reliability.md 7.D2: unreachable 2-10 min
    psu = next(c for c in HGX_H100 if c.kind == "psu")
    assert not psu.banks  # no A/B bank: the write is the activation
    longest = max(c.stage_minutes + c.activate_minutes for c in HGX_H100 if c.kind != "psu")
    assert psu.stage_minutes + psu.activate_minutes >= longest
