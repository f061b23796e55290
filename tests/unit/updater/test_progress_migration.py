"""Typed, versioned work-item progress (issue 28 item 2): every document the previous release
stored is read by this release's model of its kind, and what this release writes back keeps
every key and value the previous release wrote, so a rolling upgrade resumes nodes mid-step in
either direction (an older updater still running reads what a newer one wrote)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lockstep_common.envelope import make_envelope, source_of
from lockstep_common.events.v1 import DriftDetected, DriftItem
from lockstep_common.vocabulary import Component, DriftKind, Severity
from lockstep_updater.domain.orphans import ORPHANABLE, orphan_end
from lockstep_updater.domain.progress import (
    BY_KIND,
    SCHEMA_VERSION,
    RemedyProgress,
    RollbackProgress,
    UnknownProgress,
    UpdateProgress,
    document,
    load,
)
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.handlers import Handlers
from lockstep_updater.store import RELEASE, REMEDY, ROLLBACK, UPDATE
from lockstep_updater.testing.memory_store import MemoryStore

HANDLERS = Handlers(RemedyPolicy.AUTOMATIC)
NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)  # handlers are given the time

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[2] / "data" / "updater" / "progress-v0"

# Shapes the previous release wrote that no captured test run reached, from the code writing
# them: Handlers.drift_detected (``{"pin": ...}``) and the in-band step's halt while a unit
# is in flight (``note``).
WRITTEN_BY_CODE: list[tuple[str, str, dict[str, Any]]] = [
    (REMEDY, "pending", {"pin": "580.95.05"}),
    (
        UPDATE,
        "in_band",
        {
            "pool": "p0",
            "components": {},
            "in_band": {
                "version": "580.95.05",
                "fallback": "570.172.08",
                "attempt": "target",
                "sent": {"install": True, "reboot": True},
                "components": {"driver": "580.95.05"},
                "before": {"driver": "570.172.08"},
                "started_at": 1764400000.5,
                "reboot_sent_at": 1764400100.25,
                "note": "rollout halted: finishing the driver unit in flight",
            },
            "in_band_sent": True,
            "ending": "done",
        },
    ),
]


def stored() -> list[tuple[str, str, dict[str, Any]]]:
    shapes = [
        (path.stem, item["state"], item["progress"])
        for path in sorted(DATA.glob("*.json"))
        for item in json.loads(path.read_text())
    ]
    return shapes + WRITTEN_BY_CODE


SHAPES = stored()


def test_the_captured_shapes_cover_every_kind_and_working_state() -> None:
    kinds = {kind for kind, _, _ in SHAPES}
    assert kinds == set(BY_KIND) == {UPDATE, ROLLBACK, REMEDY, RELEASE}
    states = {NodeStep(state) for kind, state, _ in SHAPES if kind == UPDATE}
    working = set(NodeStep) - {NodeStep.PENDING}
    assert working <= states


@pytest.mark.parametrize(("kind", "state", "doc"), SHAPES, ids=lambda v: str(v)[:24])
def test_every_previous_shape_reads_and_writes_back_what_it_held(
    kind: str, state: str, doc: dict[str, Any]
) -> None:
    progress = load(kind, doc)
    assert isinstance(progress, BY_KIND[kind])
    written = document(progress)
    # Every key and value the previous release wrote survives a read and a write by this one,
    # nested ones included: its readers (``get``/``setdefault``) see what they saw.
    assert _kept(doc, written), (doc, written)
    assert written["schema_version"] == SCHEMA_VERSION
    # No ``null`` where the previous release wrote nothing: it read absent keys by default.
    assert None not in written.values()
    assert load(kind, written) == progress


@pytest.mark.parametrize(
    ("kind", "state", "doc"),
    [s for s in SHAPES if NodeStep(s[1]) in ORPHANABLE],
    ids=lambda v: str(v)[:24],
)
def test_the_reaper_decides_the_same_on_either_release_s_document(
    kind: str, state: str, doc: dict[str, Any]
) -> None:
    step = NodeStep(state)
    assert orphan_end(step, document(load(kind, doc))) is orphan_end(step, doc)


def test_values_are_typed_once_read() -> None:
    (_, _, doc) = next(s for s in SHAPES if s[0] == UPDATE and s[2].get("components"))
    progress = load(UPDATE, doc)
    assert isinstance(progress, UpdateProgress)
    plan = next(iter(progress.components.values()))
    assert isinstance(plan.sent, bool) and isinstance(plan.targets, list)
    remedy = load(REMEDY, {"pin": "580.95.05"})
    assert isinstance(remedy, RemedyProgress) and remedy.pin == "580.95.05"


@pytest.mark.parametrize(
    ("kind", "doc", "message"),
    [
        (UPDATE, {"schema_version": SCHEMA_VERSION + 1}, "schema_version 2 is not one"),
        (UPDATE, {"schema_version": "1"}, "schema_version '1' is not one"),
        (UPDATE, {"schema_version": -1}, "schema_version -1 is not one"),
        (UPDATE, {"components": {"gpu": {"version": "1"}}}, "update progress does not read"),
        (UPDATE, {"activate_sent": "yes please"}, "update progress does not read"),
        (REMEDY, {"components": {}}, "remedy progress does not read"),
        (UPDATE, {"ending": "sideways"}, "update progress does not read"),
        (UPDATE, {"surprise": 1}, "update progress does not read"),
        ("upgrade", {}, "no progress model for work items of kind 'upgrade'"),
    ],
)
def test_a_document_this_release_cannot_read_is_refused_by_name(
    kind: str, doc: dict[str, Any], message: str
) -> None:
    with pytest.raises(UnknownProgress, match=message):
        load(kind, doc)


def _kept(old: Any, new: Any) -> bool:
    if isinstance(old, dict):
        return isinstance(new, dict) and all(k in new and _kept(v, new[k]) for k, v in old.items())
    if isinstance(old, list):
        return (
            isinstance(new, list)
            and len(old) == len(new)
            and all(_kept(a, b) for a, b in zip(old, new, strict=True))
        )
    return bool(old == new and type(old) is type(new))


async def test_a_remedy_this_release_records_is_versioned_and_keeps_its_pin() -> None:
    store = MemoryStore()
    drift = DriftDetected(
        node_id="n1",
        site="site-a",
        stack_hash=None,
        items=(
            DriftItem(
                component=Component.GPU_GSP,
                expected="580.95.05",
                actual=None,
                kind=DriftKind.GSP_MISMATCH,
                severity=Severity.CRITICAL,
                detail="no /lib/firmware/nvidia/580.95.05/ for the loaded module",
            ),
            DriftItem(
                component=Component.DRIVER,
                expected="580.95.05",
                actual="570.172.08",
                kind=DriftKind.UNEXPECTED,
                severity=Severity.CRITICAL,
                detail="the node's pin names 580.95.05",
            ),
        ),
    )
    async with store.transaction() as tx:
        envelope = make_envelope(drift, source=source_of("inventory"))
        await HANDLERS.drift_detected(tx, envelope, now=NOW)
    stored = store.item("n1").progress
    assert stored["schema_version"] == SCHEMA_VERSION
    progress = load(REMEDY, stored)
    assert isinstance(progress, RemedyProgress) and progress.in_band is None
    assert progress.pin == "580.95.05" == stored["pin"]  # as the previous release stored it


def test_the_chosen_bmc_profile_is_kept_and_an_older_item_has_none() -> None:
    older = load(UPDATE, {"pool": "p0", "components": {}})
    assert isinstance(older, UpdateProgress) and older.bmc_profile is None
    assert "bmc_profile" not in document(older)  # the previous release never wrote the key
    chosen = load(ROLLBACK, {"components": {}, "bmc_profile": "nvidia-gb200-nvl"})
    assert document(chosen)["bmc_profile"] == "nvidia-gb200-nvl"
    assert load(ROLLBACK, document(chosen)) == chosen


def test_a_flip_back_begun_through_the_retired_switch_bank_still_reads() -> None:
    # The previous release recorded the simulator's OEM SwitchBank (since deleted) as the
    # mechanism; a rolling upgrade must resume such an item, not strand it.
    doc = {"components": {}, "rollback": True, "mechanism": "simulator_switch_bank"}
    progress = load(ROLLBACK, doc)
    assert isinstance(progress, RollbackProgress) and progress.mechanism is None
    assert "mechanism" not in document(progress)
    with pytest.raises(UnknownProgress, match="mechanism"):
        load(ROLLBACK, {"components": {}, "mechanism": "teleport"})
