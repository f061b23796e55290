"""Gated waves: canary and control from wave.planned, the state table, the judged window."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from lockstep_common.events.v1 import WavePlanned, WaveStratum
from lockstep_common.transitions import InvalidTransition
from lockstep_common.vocabulary import Component
from lockstep_healthgate.domain.readings import Columns, ColumnsBuilder
from lockstep_healthgate.domain.waves import (
    ALLOWED,
    Member,
    Wave,
    WaveState,
    judged_window,
    members_of,
    sample_table,
    transition,
)

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _planned(**fields: object) -> WavePlanned:
    base: dict[str, object] = {
        "rollout_id": "r1",
        "wave": 0,
        "node_ids": ("a1", "a2", "b1"),
        "components": (Component.GPU_VBIOS,),
        "max_unavailable": 1,
        "failure_budget": 0,
        "soak_seconds": 60,
    }
    return WavePlanned.model_validate({**base, **fields})


def test_members_are_canary_and_control_per_stratum() -> None:
    planned = _planned(
        strata=(
            WaveStratum(key="gb200/x", node_ids=("a1", "a2"), control_ids=("c1", "c2")),
            WaveStratum(key="h100/y", node_ids=("b1",), control_ids=("c3", "a1")),
        )
    )
    assert members_of(planned) == (
        Member("a1", "gb200/x", True),  # also named as control of h100/y: canary wins
        Member("a2", "gb200/x", True),
        Member("b1", "h100/y", True),
        Member("c1", "gb200/x", False),
        Member("c2", "gb200/x", False),
        Member("c3", "h100/y", False),
    )


def test_a_wave_without_strata_is_all_canary_of_the_default_stratum() -> None:
    assert members_of(_planned()) == (
        Member("a1", "all", True),
        Member("a2", "all", True),
        Member("b1", "all", True),
    )


@pytest.mark.parametrize(("current", "target"), list(itertools.product(WaveState, WaveState)))
def test_every_state_change_follows_the_table(current: WaveState, target: WaveState) -> None:
    if target in ALLOWED[current]:
        assert transition(current, target) is target
    else:
        with pytest.raises(InvalidTransition):
            transition(current, target)


def test_a_decided_or_closed_wave_never_moves() -> None:
    assert ALLOWED[WaveState.DECIDED] == ALLOWED[WaveState.CLOSED] == frozenset()


def test_the_window_is_the_soak_and_the_baseline_before_the_plan() -> None:
    wave = Wave("r1", 0, WaveState.SOAKING, T0, 600, (), completed_at=T0 + timedelta(hours=1))
    window = judged_window(wave, baseline_s=1800)
    assert window.baseline_start == T0 - timedelta(seconds=1800)
    assert window.baseline_end == T0
    assert window.start == T0 + timedelta(hours=1)
    assert window.end == wave.due_at == T0 + timedelta(hours=1, seconds=600)


def test_an_uncompleted_wave_has_no_window() -> None:
    with pytest.raises(ValueError, match="has not completed"):
        judged_window(Wave("r1", 0, WaveState.UPDATING, T0, 600, ()), baseline_s=60)


def test_the_table_keeps_members_and_splits_baseline_from_soak() -> None:
    members = (Member("a", "s", True), Member("c", "s", False))
    table = sample_table(
        members,
        Columns.of(
            node=["a", "c", "x", "a", "a"],
            metric=["m", "m", "m", "m", "m"],
            value=[1.0, 2.0, 3.0, 4.0, 5.0],
            time=[100.0, 100.0, 100.0, 50.0, 75.0],
        ),
        soak_start=90.0,
        baseline_end=60.0,
    )
    assert table.nodes == ("a", "c")  # x is no member
    assert table.node_canary.tolist() == [True, False]
    # 5.0 at t=75 falls between the plan and the soak (the update itself): left out
    assert sorted(zip(table.value.tolist(), table.baseline.tolist(), strict=True)) == [
        (1.0, False),
        (2.0, False),
        (4.0, True),
    ]


def test_skipping_the_update_leaves_the_judges_table_unchanged() -> None:
    members = (Member("a", "s", True), Member("b", "s", True), Member("c", "s", False))
    rows = [  # b reports only while being updated; metric q only then too
        ("a", "m", 4.0, 50.0),
        ("b", "q", 9.0, 70.0),
        ("a", "m", 5.0, 75.0),
        ("c", "m", 2.0, 90.0),
        ("a", "m", 1.0, 100.0),
        ("x", "m", 3.0, 100.0),
    ]
    full = Columns.of(
        node=[r[0] for r in rows],
        metric=[r[1] for r in rows],
        value=[r[2] for r in rows],
        time=[r[3] for r in rows],
    )
    builder = ColumnsBuilder(["b", "a"], ["q", "m"])  # what a store names from [60, 90)
    builder.extend(r for r in rows if not 60.0 <= r[3] < 90.0)
    skipped = builder.build()
    assert skipped.rows == 4
    tables = [sample_table(members, c, soak_start=90.0, baseline_end=60.0) for c in (full, skipped)]
    assert tables[0].nodes == tables[1].nodes == ("a", "b", "c")
    assert tables[0].metrics == tables[1].metrics == ("m", "q")
    for name in ("node_canary", "node_stratum", "node", "metric", "value", "time", "baseline"):
        assert getattr(tables[0], name).tolist() == getattr(tables[1], name).tolist(), name


def test_columns_read_in_chunks_are_the_rows_in_order() -> None:
    builder = ColumnsBuilder()
    builder.extend([("n1", "m", 1.0, 10.0), ("n2", "m", 2.0, 10.0)])
    builder.extend([])
    builder.extend([("n1", "k", 3.0, 20.0)])
    cols = builder.build().plus(["n3"], "heartbeat", 0.0, 30.0)
    assert cols.node == ["n1", "n2", "n1", "n3"]
    assert cols.metric == ["m", "m", "k", "heartbeat"]
    assert cols.value.tolist() == [1.0, 2.0, 3.0, 0.0]
    assert cols.time.tolist() == [10.0, 10.0, 20.0, 30.0]
    assert cols.node_code.dtype.itemsize == 4  # codes, not names: 24 bytes a reading
    assert ColumnsBuilder().build().rows == 0
