"""Bus events wake the pages they concern, and nothing else (their content is never used)."""

from __future__ import annotations

import pytest

from lockstep_console.nudges import ANY, FLEET, Nudges, key_of

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("subject", "key"),
    [
        ("rollout.halted.r-1", "r-1"),
        ("gate.tripped.r-1", "r-1"),
        ("device.failed.r-1.node-7", "r-1"),
        ("drift.detected.site-a.node-7", FLEET),
        ("drift.stragglers.gb200", FLEET),
        ("rollout", None),
        ("telemetry.observed.health.s.n", None),
    ],
)
def test_the_key_of_a_subject(subject: str, key: str | None) -> None:
    assert key_of(subject) == key


async def test_an_event_wakes_its_rollout_and_the_list_only() -> None:
    nudges = Nudges()
    with nudges.watch("r-1") as one, nudges.watch("r-2") as two, nudges.watch(ANY) as listed:
        nudges.nudge("gate.tripped.r-1")
        assert one.is_set() and listed.is_set() and not two.is_set()
    assert nudges.watching("r-1") == 0  # a closed page stops watching
