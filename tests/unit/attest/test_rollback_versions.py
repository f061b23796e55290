"""Version ordering for the attest service's rollback check: the one ordering
(``lockstep_common.versions``) on the vendor strings manifests carry, VBIOS hex included."""

from __future__ import annotations

import pytest

from lockstep_common.versions import older

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
    ],
)
def test_older_versions_sort_first(a: str, b: str) -> None:
    assert older(a, b)
    assert older(b, a) is False
    assert older(a, a) is False


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # Is 25.06 the release and 25.06-2 its second patch, or (SemVer 11.3) a pre-release
        # below it? The strings do not say, so the rollback check refuses rather than guesses.
        ("25.06", "25.06-2_NV_WW_01"),
        ("1.0-rc1", "1.0-beta2"),
    ],
)
def test_versions_of_different_shapes_are_not_ordered(a: str, b: str) -> None:
    assert older(a, b) is None
    assert older(b, a) is None
