"""``sweep_gc`` restores the collector's settings."""

from __future__ import annotations

import gc

from lockstep_inventory.adapters.sweeper import sweep_gc


def test_sweep_gc_restores_the_collector() -> None:
    before = gc.get_threshold()
    with sweep_gc(young=12_345):
        assert gc.get_threshold()[0] == 12_345
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
