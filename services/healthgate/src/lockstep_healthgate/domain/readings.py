"""Stored readings as compact columns: what a store hands the judge and the hard rules.

A soak's evaluation reads every reading of every member of the wave over the baseline and the
soak: on a whole-fleet wave, millions of rows. As Python objects (a row, a node name, a metric
name and two floats each) that is about 300 bytes a row, and the healthgate's peak memory grew
with the fleet (issue 13, item 6: 801 MB at 2,000 nodes). Here a row is four array cells (node
and metric as int32 codes into ``nodes`` and ``metrics``, value and time as float64: 24 bytes),
and a store appends what it reads in bounded chunks (:class:`ColumnsBuilder`), so only one
chunk of Python rows is alive at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Codes = npt.NDArray[np.int32]
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, eq=False)
class Columns:
    """Readings as parallel arrays (time in seconds since the epoch); a row's node and metric
    are codes into ``nodes`` and ``metrics``: every node and metric seen in the window read,
    including those of readings a store was asked to skip (their rows are not here)."""

    nodes: tuple[str, ...]
    metrics: tuple[str, ...]
    node_code: Codes
    metric_code: Codes
    value: Floats
    time: Floats

    @classmethod
    def of(
        cls,
        node: Sequence[str],
        metric: Sequence[str],
        value: Sequence[float],
        time: Sequence[float],
    ) -> Columns:
        """From name columns (small reads and tests)."""
        builder = ColumnsBuilder()
        builder.extend(zip(node, metric, value, time, strict=True))
        return builder.build()

    @property
    def rows(self) -> int:
        """Number of rows."""
        return len(self.node_code)

    @property
    def node(self) -> list[str]:
        """Each row's node name (a list of the size of the read: for small reads and tests)."""
        return [self.nodes[i] for i in self.node_code.tolist()]

    @property
    def metric(self) -> list[str]:
        """Each row's metric name (as ``node``)."""
        return [self.metrics[i] for i in self.metric_code.tolist()]

    def plus(self, node_ids: Sequence[str], metric: str, value: float, time: float) -> Columns:
        """These rows with one more reading of ``metric`` for each of ``node_ids``."""
        if not node_ids:
            return self
        builder = ColumnsBuilder(self.nodes, self.metrics)
        builder.extend((n, metric, value, time) for n in node_ids)
        more = builder.build()
        return Columns(
            nodes=more.nodes,
            metrics=more.metrics,
            node_code=np.concatenate((self.node_code, more.node_code)),
            metric_code=np.concatenate((self.metric_code, more.metric_code)),
            value=np.concatenate((self.value, more.value)),
            time=np.concatenate((self.time, more.time)),
        )


@dataclass
class ColumnsBuilder:
    """Appends (node, metric, value, time) rows chunk by chunk into :class:`Columns`; each
    chunk becomes arrays at once, so the caller can drop its rows before reading more."""

    known_nodes: Sequence[str] = ()
    known_metrics: Sequence[str] = ()
    _node: dict[str, int] = field(init=False)
    _metric: dict[str, int] = field(init=False)
    _chunks: list[tuple[Codes, Codes, Floats, Floats]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self._node = {n: i for i, n in enumerate(self.known_nodes)}
        self._metric = {m: i for i, m in enumerate(self.known_metrics)}

    def extend(self, rows: Iterable[tuple[str, str, float, float]]) -> None:
        """Append one chunk of (node, metric, value, time) rows."""
        node, metric = self._node, self._metric
        nodes: list[int] = []
        metrics: list[int] = []
        values: list[float] = []
        times: list[float] = []
        for n, m, v, t in rows:
            nodes.append(node.setdefault(n, len(node)))
            metrics.append(metric.setdefault(m, len(metric)))
            values.append(v)
            times.append(t)
        if nodes:
            self._chunks.append(
                (
                    np.array(nodes, dtype=np.int32),
                    np.array(metrics, dtype=np.int32),
                    np.array(values, dtype=np.float64),
                    np.array(times, dtype=np.float64),
                )
            )

    def build(self) -> Columns:
        """The rows appended so far, in order."""

        chunks = self._chunks or [
            (
                np.zeros(0, dtype=np.int32),
                np.zeros(0, dtype=np.int32),
                np.zeros(0, dtype=np.float64),
                np.zeros(0, dtype=np.float64),
            )
        ]
        return Columns(
            nodes=tuple(self._node),
            metrics=tuple(self._metric),
            node_code=np.concatenate([c[0] for c in chunks]),
            metric_code=np.concatenate([c[1] for c in chunks]),
            value=np.concatenate([c[2] for c in chunks]),
            time=np.concatenate([c[3] for c in chunks]),
        )
