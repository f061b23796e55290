"""Every CLI unit test runs as if no ``lockstep up`` were running: a stack a developer left
running in the checkout's ``.data`` must not be what a test talks to."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def no_running_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LOCKSTEP_DATA_DIR", str(tmp_path / "no-stack-here"))
