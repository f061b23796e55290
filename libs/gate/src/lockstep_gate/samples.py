"""Health samples as the judge reads them: one columnar table of (node, metric, value, time).

A row is one reading of one metric on one node. Each node belongs to one group (``canary``: the
nodes the wave updated, ``control``: untouched nodes of the same profiles over the same window)
and one stratum (a hardware profile: nodes are only compared within their stratum). A row's
phase is ``soak`` (after the update, the window being judged) or ``baseline`` (before it: what the
environmental check compares each group with).

Columns are numpy arrays so that a 5,000-node evaluation stays well under a second; nodes,
metrics and strata are coded in sorted name order, so the same rows in any order build the same
table and the judge's result can be re-derived from the samples alone.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from lockstep_common.vocabulary import TOKEN_PATTERN

DEFAULT_STRATUM = "all"
MAX_NAME = 256
NODE_ID = re.compile(TOKEN_PATTERN)  # node ids become subject tokens and event fields

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


class SampleError(ValueError):
    """The samples are not usable; the message is one line naming what is wrong."""


class Group(enum.StrEnum):
    """Which side of the comparison a node is on."""

    CANARY = "canary"
    CONTROL = "control"


class Phase(enum.StrEnum):
    """Before the update (baseline) or the window being judged (soak)."""

    SOAK = "soak"
    BASELINE = "baseline"


@dataclass(frozen=True)
class Sample:
    """One row as read from a file or a store."""

    node: str
    group: Group
    metric: str
    value: float  # NaN stands for a missing value; the metric's rule decides what it becomes
    time: float  # seconds since the epoch
    stratum: str = DEFAULT_STRATUM
    phase: Phase = Phase.SOAK


@dataclass(frozen=True, eq=False)
class SampleTable:
    """Rows as parallel arrays, and per-node attributes indexed by node code."""

    nodes: tuple[str, ...]  # sorted; a node's code is its index
    node_canary: Bools  # per node: in the canary group
    node_stratum: Ints  # per node: index into ``strata``
    strata: tuple[str, ...]  # sorted
    metrics: tuple[str, ...]  # sorted; a metric's code is its index
    node: Ints  # per row
    metric: Ints  # per row
    value: Floats  # per row
    time: Floats  # per row, seconds since the epoch
    baseline: Bools  # per row: phase is baseline

    def __post_init__(self) -> None:
        rows = len(self.node)
        for name in ("metric", "value", "time", "baseline"):
            if len(getattr(self, name)) != rows:
                raise SampleError(f"column {name} has {len(getattr(self, name))} rows, not {rows}")
        if len(self.node_canary) != len(self.nodes) or len(self.node_stratum) != len(self.nodes):
            raise SampleError("per-node columns do not match the node list")
        if rows and not np.isfinite(self.time).all():
            raise SampleError("every sample needs a finite time")
        for name in self.nodes:
            if not NODE_ID.match(name):
                raise SampleError(f"node {name[:80]!r} is not a node id ({TOKEN_PATTERN})")

    @property
    def rows(self) -> int:
        """Number of rows."""
        return len(self.node)

    def metric_code(self, name: str) -> int | None:
        """The code of a metric, or None when no row carries it."""
        try:
            return self.metrics.index(name)
        except ValueError:
            return None

    @classmethod
    def from_rows(
        cls, rows: Iterable[Sample], *, places: Sequence[str] | None = None
    ) -> SampleTable:
        """Build the table; a node in two groups or two strata is refused. ``places`` names
        each row in messages (``line 7``), else ``row N``."""
        rows = list(rows)
        group: dict[str, Group] = {}
        stratum: dict[str, str] = {}
        for number, r in enumerate(rows, start=1):
            where = places[number - 1] if places else f"row {number}"
            _check_row(where, r)
            if group.setdefault(r.node, r.group) is not r.group:
                raise SampleError(f"{where}: node {r.node} is in both canary and control")
            if stratum.setdefault(r.node, r.stratum) != r.stratum:
                raise SampleError(
                    f"{where}: node {r.node} is in two strata ({stratum[r.node]} and {r.stratum})"
                )
        nodes = tuple(sorted(group))
        strata = tuple(sorted(set(stratum.values())))
        metrics = tuple(sorted({r.metric for r in rows}))
        node_code = {n: i for i, n in enumerate(nodes)}
        metric_code = {m: i for i, m in enumerate(metrics)}
        stratum_code = {s: i for i, s in enumerate(strata)}
        return cls(
            nodes=nodes,
            node_canary=np.array([group[n] is Group.CANARY for n in nodes], dtype=np.bool_),
            node_stratum=np.array([stratum_code[stratum[n]] for n in nodes], dtype=np.int64),
            strata=strata,
            metrics=metrics,
            node=np.array([node_code[r.node] for r in rows], dtype=np.int64),
            metric=np.array([metric_code[r.metric] for r in rows], dtype=np.int64),
            value=np.array([r.value for r in rows], dtype=np.float64),
            time=np.array([r.time for r in rows], dtype=np.float64),
            baseline=np.array([r.phase is Phase.BASELINE for r in rows], dtype=np.bool_),
        )

    @classmethod
    def from_columns(
        cls,
        *,
        nodes: Sequence[str],
        canary: Sequence[bool] | Bools,
        node_strata: Sequence[str],
        metrics: Sequence[str],
        node: Ints,
        metric: Ints,
        value: Floats,
        time: Floats,
        baseline: Bools | None = None,
    ) -> SampleTable:
        """Build from arrays coded against ``nodes`` and ``metrics`` (any order, no duplicates):
        what a store or a generator that already holds columns uses."""
        if len(set(nodes)) != len(nodes) or len(set(metrics)) != len(metrics):
            raise SampleError("node and metric names must be unique")
        node_order = np.argsort(np.array(nodes, dtype=object))
        node_rank = np.empty(len(nodes), dtype=np.int64)
        node_rank[node_order] = np.arange(len(nodes))
        metric_order = np.argsort(np.array(metrics, dtype=object))
        metric_rank = np.empty(len(metrics), dtype=np.int64)
        metric_rank[metric_order] = np.arange(len(metrics))
        strata = tuple(sorted(set(node_strata)))
        stratum_code = {s: i for i, s in enumerate(strata)}
        canary_arr = np.asarray(canary, dtype=np.bool_)
        return cls(
            nodes=tuple(nodes[i] for i in node_order),
            node_canary=canary_arr[node_order],
            node_stratum=np.array(
                [stratum_code[node_strata[i]] for i in node_order], dtype=np.int64
            ),
            strata=strata,
            metrics=tuple(metrics[i] for i in metric_order),
            node=node_rank[np.asarray(node, dtype=np.int64)],
            metric=metric_rank[np.asarray(metric, dtype=np.int64)],
            value=np.asarray(value, dtype=np.float64),
            time=np.asarray(time, dtype=np.float64),
            baseline=(
                np.zeros(len(node), dtype=np.bool_)
                if baseline is None
                else np.asarray(baseline, dtype=np.bool_)
            ),
        )


def _check_row(where: str, r: Sample) -> None:
    if not NODE_ID.match(r.node):
        raise SampleError(f"{where}: node {r.node[:80]!r} is not a node id ({TOKEN_PATTERN})")
    for what, text in (("metric", r.metric), ("stratum", r.stratum)):
        if not text or len(text) > MAX_NAME:
            raise SampleError(f"{where}: {what} must be 1 to {MAX_NAME} characters")
    if not math.isfinite(r.time):
        raise SampleError(f"{where}: time must be a finite number of seconds")
