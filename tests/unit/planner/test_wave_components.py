"""Which of a bundle's components a wave hands the updater (``wave.planned``), in the order it
works them (firmware, then the software layer): all of them, except what ships inside the
driver package when the driver is there to bring it."""

from __future__ import annotations

import pytest

from lockstep_planner.domain.intake import installable

pytestmark = pytest.mark.unit


def test_gsp_firmware_rides_with_the_driver_package() -> None:
    wave = ["driver", "gpu_gsp", "fabric_manager", "cuda", "nccl", "bmc", "gpu_vbios", "nic"]
    assert installable(wave) == (
        "bmc",
        "gpu_vbios",
        "nic",
        "driver",
        "fabric_manager",
        "cuda",
        "nccl",
    )


def test_without_the_driver_nothing_is_left_out_and_repeats_are_named_once() -> None:
    assert installable(["gpu_gsp", "bmc", "bmc"]) == ("bmc", "gpu_gsp")
