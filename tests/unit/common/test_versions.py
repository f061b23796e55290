"""Ordering firmware versions as the BMCs write them (standards.md 1.3), or refusing to."""

from __future__ import annotations

import pytest

from lockstep_common.versions import compare_versions

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("a", "b", "scheme", "order"),
    [
        # NVIDIA GPU firmware: hexadecimal bytes, 6C after 52 (GB200 mockup, HGX_FW_GPU_0)
        ("97.00.6C.00.03", "97.00.52.00.01", None, 1),
        ("97.00.50.00.01", "97.00.52.00.01", "OEM", -1),
        ("97.00.9a.00.01", "97.00.9A.00.01", None, 0),
        ("97.00.A0.00.01", "97.00.99.00.01", None, 1),
        # CPLD: space-separated 0x bytes; ERoT: a letter-and-digits suffix
        ("0x00 0x0b 0x03 0x04", "0x00 0x0a 0x03 0x04", None, 1),
        ("01.03.0262.0000_n04", "01.03.0200.0000_n04", None, 1),
        ("01.03.0262.0000_n04", "01.03.0262.0000_n05", None, -1),
        # BMC: a product name, then numbers
        ("GB200Nvl-24.12-8", "GB200Nvl-24.09-4", None, 1),
        # DotIntegerNotation: integers, leading zeros ignored, missing fields are 0
        ("28.39.1002", "28.42.1234", "DotIntegerNotation", -1),
        ("1.2", "1.2.0", "DotIntegerNotation", 0),
        ("1.10", "1.9", "DotIntegerNotation", 1),
        # SemVer 2.0.0 section 11
        ("1.0.0-rc.1", "1.0.0", "SemVer", -1),
        ("1.0.0-alpha.2", "1.0.0-alpha.10", "SemVer", -1),
        ("1.0.0-alpha", "1.0.0-alpha.1", "SemVer", -1),
        ("2.0.0+build.5", "2.0.0+build.9", "SemVer", 0),
        ("1.0.0-beta", "1.0.0-alpha.1", "SemVer", 1),
    ],
)
def test_versions_are_ordered(a: str, b: str, scheme: str | None, order: int) -> None:
    assert compare_versions(a, b, scheme) == order
    assert compare_versions(b, a, scheme) == -order


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("GB200Nvl-24.12-8", "GB300Nvl-24.12-8"),  # another product, not a newer version
        ("buildbrain-gcid-38635631", "GB200Nvl-24.12-8"),  # different shapes
        ("1.2", "1.2.0"),  # without DotIntegerNotation, not assumed equal
        ("97.00.6C.00.03", "97.00.6.00.03"),  # hexadecimal fields of different widths
        ("1.0-rc1", "1.0-beta2"),
    ],
)
def test_versions_that_cannot_be_ordered_are_none(a: str, b: str) -> None:
    assert compare_versions(a, b) is None
