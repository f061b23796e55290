"""The verdict on a version read back after an update: only the exact version pushed passes."""

from __future__ import annotations

import pytest

from lockstep_redfish.readback import Readback, describe, judge

pytestmark = pytest.mark.unit
OLD, NEW = "97.00.6C.00.03", "97.00.9A.00.01"


@pytest.mark.parametrize(
    ("after", "verdict"),
    [
        (NEW, Readback.VERIFIED),
        (OLD, Readback.UNCHANGED),  # a silent revert, or an inventory that lags
        ("97.00.52.00.01", Readback.DOWNGRADED),
        ("97.00.9B.00.01", Readback.OTHER),
        ("97.00.9a.00.01", Readback.OTHER),  # exact string: not "equal when ordered"
        ("nonsense", Readback.OTHER),
        (None, Readback.MISSING),
    ],
)
def test_only_the_version_pushed_is_verified(after: str | None, verdict: Readback) -> None:
    assert judge(OLD, after, NEW, "OEM") is verdict


def test_each_verdict_reads_as_a_clause() -> None:
    path = "/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_1"
    assert describe(path, Readback.DOWNGRADED, OLD, "97.00.52.00.01") == (
        f"{path} silently downgraded from '{OLD}' to '97.00.52.00.01'"
    )
    assert describe(path, Readback.UNCHANGED, OLD, OLD) == f"{path} unchanged at '{OLD}'"
    assert describe(path, Readback.MISSING, OLD, None) == f"{path} reports no Version"
