"""Shared value types: what a clipped free text still is."""

from __future__ import annotations

import pydantic
import pytest

from lockstep_common.events.v1 import CheckVerdict, DeviceActivated
from lockstep_common.vocabulary import CheckResult, Component, as_version, clip_text

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


def activated(version: str) -> DeviceActivated:
    return DeviceActivated(
        rollout_id="r1", node_id="n1", component=Component.BMC, to_version=version
    )


@pytest.mark.parametrize("bad", ["1.2\x00", "1.2\nforged log line", "\x7f1", "1.2\x85", "\t"])
def test_a_version_with_a_control_character_is_refused(bad: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="to_version"):
        activated(bad)


def test_versions_as_vendors_write_them_are_kept() -> None:
    for version in ("1.2.3", "GB200Nvl 25.01-rc2 (build 7)", "570.124.06", "v2+ü"):
        assert activated(version).to_version == version


def test_a_version_a_device_reported_is_kept_as_far_as_an_event_can_carry_it() -> None:
    assert as_version("24.09") == "24.09"
    assert activated(as_version("24.09\x00\n")).to_version == "24.09\ufffd\ufffd"
    assert activated(as_version("9" * 500)).to_version == "9" * 128
    assert activated(as_version("")).to_version == "\ufffd"
