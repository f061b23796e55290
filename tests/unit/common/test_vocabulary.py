"""Shared value types: what a clipped free text still is."""

from __future__ import annotations

import pydantic
import pytest

from lockstep_common.events.v1 import CheckVerdict
from lockstep_common.vocabulary import CheckResult, clip_text

pytestmark = pytest.mark.unit


def verdict(reason: str) -> CheckVerdict:
    return CheckVerdict(check="sbom", result=CheckResult.FAIL, reason=reason, duration_ms=0.0)


def test_clipped_text_fits_a_text_field_that_refuses_the_whole() -> None:
    long = "x" * 4095 + "yz"
    with pytest.raises(pydantic.ValidationError):
        verdict(long)
    assert verdict(clip_text(long)).reason == long[:-1]


def test_text_that_fits_is_kept_whole() -> None:
    assert clip_text("image digest mismatch") == "image digest mismatch"
