"""Stragglers outside rollouts (issue 11, deliverable 6; seed 000's "silent slow node").

A node that runs a collective a little slower than its peers, or holds lower clocks, raises no
error and no gate: it only costs every job that lands on it goodput. Continuously, per hardware
profile, each node's median of a signal over a window is compared with its peers':

- a node is a **straggler** on a signal when it is both more than ``deviations`` robust standard
  deviations below the profile's median (median absolute deviation, scaled to a normal's
  standard deviation: robust to the stragglers themselves) and more than ``min_drop`` below it
  in relative terms (so a very tight fleet does not flag a 0.3% difference);
- the versions the stragglers **share** that their healthy peers mostly do not are the drift
  that may explain it: for each component version some straggler runs, Fisher's exact test on
  (stragglers, healthy peers) x (runs it, does not) says how likely that association is by
  chance (one-sided: the stragglers run it more often); those under ``alpha`` are reported.

Only lower is worse for the signals judged here (busbw, SM clock). Profiles with fewer than
``min_nodes`` nodes reporting a signal are not judged on it: too few peers to say what normal is.
Pure: the samples' medians and the versions come in; nothing is read here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from lockstep_common.vocabulary import Component

RESOLUTION = 0.001
"""The smallest spread believed, as a fraction of the median: a profile whose nodes all read
the same number has a MAD of 0, and every node 0.1% off would be infinitely deviant."""


@dataclass(frozen=True, slots=True)
class StragglerRules:
    """When a node is a straggler and when a shared version is worth reporting."""

    signals: tuple[str, ...] = ("nccl_busbw_gbps", "sm_clock_mhz")
    deviations: float = 5.0
    min_drop: float = 0.05
    min_nodes: int = 10
    alpha: float = 0.01


@dataclass(frozen=True, slots=True)
class NodeWindow:
    """One node over the window: its medians per signal and what it runs."""

    node_id: str
    site: str
    profile: str
    medians: Mapping[str, float]
    versions: Mapping[Component, str]


@dataclass(frozen=True, slots=True)
class Outlier:
    node_id: str
    site: str
    signal: str
    value: float
    peer_median: float
    deviations: float


@dataclass(frozen=True, slots=True)
class Shared:
    component: Component
    version: str
    stragglers_with: int
    stragglers: int
    peers_with: int
    peers: int
    p_value: float


@dataclass(frozen=True, slots=True)
class ProfileFinding:
    """One profile's verdict: its stragglers (worst first) and the versions they share."""

    profile: str
    nodes: int
    outliers: tuple[Outlier, ...]
    shared: tuple[Shared, ...]

    @property
    def straggler_ids(self) -> frozenset[str]:
        return frozenset(o.node_id for o in self.outliers)


def find_stragglers(nodes: Iterable[NodeWindow], rules: StragglerRules) -> list[ProfileFinding]:
    """Every profile's stragglers, sorted by profile (profiles without any are included, with
    none: a profile whose stragglers recovered is one to report too)."""
    by_profile: dict[str, list[NodeWindow]] = defaultdict(list)
    for node in nodes:
        by_profile[node.profile].append(node)
    return [_profile(p, members, rules) for p, members in sorted(by_profile.items())]


def _profile(profile: str, members: Sequence[NodeWindow], rules: StragglerRules) -> ProfileFinding:
    outliers: list[Outlier] = []
    for signal in rules.signals:
        reporting = [n for n in members if np.isfinite(n.medians.get(signal, np.nan))]
        if len(reporting) < rules.min_nodes:
            continue
        values = np.array([n.medians[signal] for n in reporting])
        median = float(np.median(values))
        spread = max(
            float(stats.median_abs_deviation(values, scale="normal")), abs(median) * RESOLUTION
        )
        for node, value in zip(reporting, values, strict=True):
            below = median - float(value)
            if below > rules.deviations * spread and below > rules.min_drop * abs(median):
                outliers.append(
                    Outlier(node.node_id, node.site, signal, float(value), median, below / spread)
                )
    # A node slow on both signals is listed once, on its worst.
    worst: dict[str, Outlier] = {}
    for o in sorted(outliers, key=lambda o: -o.deviations):
        worst.setdefault(o.node_id, o)
    ranked = tuple(sorted(worst.values(), key=lambda o: (-o.deviations, o.node_id)))
    slow = {o.node_id for o in ranked}
    healthy = [n for n in members if n.node_id not in slow]
    shared = _shared([n for n in members if n.node_id in slow], healthy, rules.alpha)
    return ProfileFinding(profile, len(members), ranked, shared)


def _shared(
    slow: Sequence[NodeWindow], healthy: Sequence[NodeWindow], alpha: float
) -> tuple[Shared, ...]:
    if not slow or not healthy:
        return ()
    found: list[Shared] = []
    candidates = {(c, v) for n in slow for c, v in n.versions.items()}
    for component, version in sorted(candidates):
        a = sum(1 for n in slow if n.versions.get(component) == version)
        c = sum(1 for n in healthy if n.versions.get(component) == version)
        table = [[a, len(slow) - a], [c, len(healthy) - c]]
        p = float(stats.fisher_exact(table, alternative="greater").pvalue)
        if p < alpha:
            found.append(Shared(component, version, a, len(slow), c, len(healthy), p))
    return tuple(sorted(found, key=lambda s: (s.p_value, s.component, s.version)))
