"""``lockstep demo`` says what it leaves behind (its state directory, with the demo's private
keys) and how to remove it (issue 31: /tmp/lockstep-demo-* was left without a word)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep_attest.testing.bundles import make_kit
from lockstep_bench.demo import kept

pytestmark = pytest.mark.unit


def test_the_demo_says_what_it_leaves_behind_and_how_to_remove_it(tmp_path: Path) -> None:
    make_kit(tmp_path / "release")
    line = kept(tmp_path)
    assert line.startswith(f"state kept in {tmp_path} (") and "MB" in line
    assert "private signing and approver keys, mode 0600" in line
    assert line.endswith(f"remove it with: rm -rf {tmp_path}")
