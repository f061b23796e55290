"""A release kit's private signing key is its owner's alone from the moment it is written: the
demo keeps its kit after it ends (issue 31: the key was left 0644 under /tmp)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from lockstep_attest.testing.bundles import make_kit

pytestmark = pytest.mark.unit


def test_the_signing_key_is_written_0600_and_a_second_kit_replaces_it(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    assert stat.S_IMODE(kit.signing_key_pem.stat().st_mode) == 0o600
    again = make_kit(tmp_path, name="second")  # same directory, same key file: rewritten
    assert stat.S_IMODE(again.signing_key_pem.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in again.signing_key_pem.read_bytes()
