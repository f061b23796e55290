"""State diagrams drawn from the transition tables into hand-written pages (docs generate)."""

from __future__ import annotations

import dataclasses
import enum
import re
from pathlib import Path
from typing import Any

import pytest

from lockstep_cli.catalog import machines, parties
from lockstep_common import schemadocs
from lockstep_common.statediagram import Machine, MissingMarkers, begin_marker, end_marker

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]
PARTIES = parties()
_EDGE = re.compile(r"^    (\S+) --> (\S+?)(?:: .*)?$")


class Lamp(enum.StrEnum):
    OFF = "off"
    ON = "on"
    BROKEN = "broken"


LAMP = Machine(
    "lamp",
    "lamp.md",
    "tests.Lamp",
    {
        Lamp.OFF: frozenset({Lamp.ON}),
        Lamp.ON: frozenset({Lamp.OFF, Lamp.BROKEN}),
        Lamp.BROKEN: frozenset(),
    },
    Lamp.OFF,
    "installed",
    {("on", "broken"): "bulb blew"},
)
PAGE = f"# Lamp\n\nprose before\n\n{begin_marker(LAMP)}\nstale\n{end_marker(LAMP)}\n\nprose after\n"


def edges(markdown: str, machine: Machine[Any]) -> set[tuple[str, str]]:
    section = markdown.split(begin_marker(machine))[1].split(end_marker(machine), maxsplit=1)[0]
    return {m.groups() for m in map(_EDGE.match, section.splitlines()) if m}  # type: ignore[misc]


def test_the_diagram_is_every_move_of_the_table_between_the_markers(tmp_path: Path) -> None:
    (tmp_path / "lamp.md").write_text(PAGE)
    lamp = dataclasses.replace(PARTIES, machines=(LAMP,))
    assert "lamp.md" in schemadocs.stale(tmp_path, lamp)
    assert "lamp.md" in schemadocs.write(tmp_path, lamp)
    page = (tmp_path / "lamp.md").read_text()
    assert page.startswith("# Lamp\n\nprose before\n\n") and page.endswith("\n\nprose after\n")
    assert "stale" not in page
    assert edges(page, LAMP) == {
        ("[*]", "off"),
        ("off", "on"),
        ("on", "off"),
        ("on", "broken"),
        ("broken", "[*]"),
    }
    assert "    on --> broken: bulb blew\n" in page
    assert "lamp.md" not in schemadocs.stale(tmp_path, lamp)  # written once, then current


def test_a_page_without_its_markers_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "lamp.md").write_text("# Lamp\n\nno markers\n")
    lamp = dataclasses.replace(PARTIES, machines=(LAMP,))
    with pytest.raises(MissingMarkers, match=r"lamp\.md: needs one '<!-- BEGIN GENERATED: lamp"):
        schemadocs.stale(tmp_path, lamp)
    with pytest.raises(MissingMarkers, match="no such page"):
        schemadocs.stale(tmp_path / "nowhere", lamp)
    assert (tmp_path / "lamp.md").read_text() == "# Lamp\n\nno markers\n"


def test_a_label_for_a_move_the_table_does_not_allow_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"labels for moves the table does not allow: \[\('broken', 'on'\)\]"
    ):
        dataclasses.replace(LAMP, labels={("broken", "on"): "repaired"})


@pytest.mark.parametrize("machine", machines(), ids=lambda m: m.name)
def test_every_committed_diagram_is_its_table(machine: Machine[Any]) -> None:
    page = (REPO / "docs" / machine.doc).read_text(encoding="utf-8")
    drawn = edges(page, machine)
    allowed = {(a.value, b.value) for a, nexts in machine.allowed.items() for b in nexts}
    ends = {(s.value, "[*]") for s, nexts in machine.allowed.items() if not nexts}
    assert drawn == allowed | ends | {("[*]", machine.initial.value)}


def test_the_planner_healthgate_attest_and_updater_machines_are_all_drawn() -> None:
    assert {m.name for m in machines()} >= {
        "node step",
        "attest job",
        "rollout",
        "wave",
        "gated wave",
    }
