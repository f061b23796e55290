"""State diagrams drawn from the transition tables (``lockstep_common.transitions``), for docs.

A persisted state machine is a ``StrEnum`` and its table of allowed moves; the diagram a reader
sees in ``docs/`` is drawn from that table by ``lockstep docs generate`` (and checked by
``lockstep docs check``), so the picture cannot drift from the rule. Each diagram is a Mermaid
``stateDiagram-v2`` block (https://mermaid.js.org/syntax/stateDiagram.html) written between two
marker comments inside a hand-written page, so the prose around it stays the author's:

    <!-- BEGIN GENERATED: updater node step (lockstep docs generate) -->
    ...the diagram...
    <!-- END GENERATED: updater node step -->

Edges are drawn in the enum's order, from the initial state (``[*] -->``) to the terminal
states (``--> [*]``); ``labels`` says why a move happens, where a word helps.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

S = TypeVar("S", bound=enum.StrEnum)


@dataclass(frozen=True, slots=True)
class Machine(Generic[S]):
    """One state machine to draw, and where.

    Args:
        name: what changes state, as the table's ``Transitions`` names it ("node step").
        doc: the page under ``docs/`` the diagram goes into.
        source: the table's dotted name, cited under the diagram.
        allowed: the table (state -> the states that may follow it).
        initial: the state a new item starts in.
        entry: what creates an item (the label of ``[*] --> initial``).
        labels: (state, next state) values -> why that move happens.
    """

    name: str
    doc: str
    source: str
    allowed: Mapping[S, frozenset[S]]
    initial: S
    entry: str = ""
    labels: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        edges = {(a.value, b.value) for a, nexts in self.allowed.items() for b in nexts}
        unknown = sorted(set(self.labels) - edges)
        if unknown:
            raise ValueError(f"{self.name}: labels for moves the table does not allow: {unknown}")
        if self.initial not in self.allowed:
            raise ValueError(f"{self.name}: initial state {self.initial} is not in the table")


def begin_marker(machine: Machine[Any]) -> str:
    return f"<!-- BEGIN GENERATED: {machine.name} (lockstep docs generate) -->"


def end_marker(machine: Machine[Any]) -> str:
    return f"<!-- END GENERATED: {machine.name} -->"


def mermaid(machine: Machine[Any]) -> str:
    """The machine's Mermaid block (with a line citing its table), ending in a newline."""
    order = list(machine.allowed)
    lines = ["```mermaid", "stateDiagram-v2"]
    lines.append(_edge("[*]", machine.initial.value, machine.entry))
    for state in order:
        for target in sorted(machine.allowed[state], key=order.index):
            label = machine.labels.get((state.value, target.value), "")
            lines.append(_edge(state.value, target.value, label))
    lines += [_edge(s.value, "[*]", "") for s in order if not machine.allowed[s]]
    lines += ["```", "", f"Drawn from `{machine.source}`."]
    return "\n".join(lines) + "\n"


def _edge(a: str, b: str, label: str) -> str:
    return f"    {a} --> {b}" + (f": {label}" if label else "")


class MissingMarkers(ValueError):
    """A page that should hold a generated diagram has no (or broken) markers for it."""


def splice(page: str, machine: Machine[Any]) -> str:
    """``page`` with the text between the machine's markers replaced by its diagram."""
    begin, end = begin_marker(machine), end_marker(machine)
    if page.count(begin) != 1 or page.count(end) != 1 or page.index(begin) > page.index(end):
        raise MissingMarkers(
            f"{machine.doc}: needs one '{begin}' line and, after it, one '{end}' line "
            "where the diagram goes"
        )
    head, rest = page.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{mermaid(machine)}{end}{tail}"
