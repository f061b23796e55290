"""Version ordering for the attest service's rollback check: vendor strings, and VBIOS hex."""

from __future__ import annotations

import pytest

from lockstep_attest.domain.versions import older

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("97.00.90.00.00", "97.00.9A.00.01"),  # VBIOS fields are hex bytes: 0x90 < 0x9A
        ("97.00.6C.00.03", "97.00.9A.00.01"),
        ("97.00.9A.00.01", "97.00.A1.00.02"),
        ("97.00.09.00.00", "97.00.10.00.00"),  # digits only: same order as decimal
        ("580.95.05", "580.126.09"),
        ("25.06-1", "25.06-2"),
        ("25.06", "25.06-2_NV_WW_01"),  # a prefix is older
    ],
)
def test_older_versions_sort_first(a: str, b: str) -> None:
    assert older(a, b)
    assert not older(b, a)
    assert not older(a, a)
