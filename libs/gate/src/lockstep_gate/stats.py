"""Robust statistics of the judge: per-node aggregates, the Hodges-Lehmann shift with its
distribution-free interval, a median interval, and the tests scipy provides.

The shift interval is Lehmann's (Lehmann 1963, Ann. Math. Statist. 34:1507; Bauer 1972, JASA
67:687; Hollander, Wolfe & Chicken, *Nonparametric Statistical Methods*, 3rd ed., 2014, section
4.3): with the ``mn`` pairwise differences ``x_i - y_j`` sorted as ``D(1) <= ... <= D(mn)``, the
interval ``[D(C), D(mn + 1 - C)]`` covers the shift with probability at least ``1 - alpha``,
where ``C`` is the lower ``alpha/2`` critical value of the Mann-Whitney ``U`` statistic. We use
the large-sample value ``C = mn/2 - z(1 - alpha/2) * sqrt(mn(m + n + 1)/12)`` rounded to the
nearest integer (the book's equation for large samples; the normal quantile from scipy), without
a tie correction: ties make the plain variance larger than the true one, so the interval is
conservative, never narrower. The point estimate is the median of the same differences.

Those order statistics are selected without materialising all ``mn`` differences (6.25 million
for 2,500 x 2,500): rows of the implicit sorted matrix are narrowed around weighted-median pivots
until at most :data:`WINDOW` candidates are left, which are then partitioned (the selection
scheme of Johnson & Mizoguchi 1978, SIAM J. Comput. 7:147, as Monahan's 1984 HL algorithm uses).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from lockstep_gate.samples import Bools, Floats, Ints

WINDOW = 1 << 17  # candidates partitioned directly; below this all pairs are enumerated


@dataclass(frozen=True)
class Shift:
    """Hodges-Lehmann shift of x relative to y and its confidence interval."""

    estimate: float
    low: float
    high: float


def segments(keys: Ints) -> tuple[Ints, Ints]:
    """Starts and lengths of the runs of equal values in a sorted key array."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.concatenate(([0], np.flatnonzero(np.diff(keys)) + 1)).astype(np.int64)
    counts = np.diff(np.append(starts, len(keys))).astype(np.int64)
    return starts, counts


def segment_quantile(values: Floats, starts: Ints, counts: Ints, q: float) -> Floats:
    """The q-quantile (linear interpolation, numpy's default) of each sorted segment."""
    pos = q * (counts - 1).astype(np.float64)
    low = np.floor(pos).astype(np.int64)
    frac = pos - low
    i = starts + low
    j = np.minimum(i + 1, starts + counts - 1)
    out: Floats = values[i] + frac * (values[j] - values[i])
    return out


def aggregate_segments(
    values: Floats,
    starts: Ints,
    counts: Ints,
    *,
    remove_outliers: Bools,
    use_mean: Bools,
    iqr_factor: float,
) -> Floats:
    """One value per segment (values sorted within each): drop samples outside the IQR fences
    ``[Q1 - f*IQR, Q3 + f*IQR]`` where asked, then the median or the mean of the rest."""
    q1 = segment_quantile(values, starts, counts, 0.25)
    q3 = segment_quantile(values, starts, counts, 0.75)
    spread = iqr_factor * (q3 - q1)
    low = np.repeat(np.where(remove_outliers, q1 - spread, -np.inf), counts)
    high = np.repeat(np.where(remove_outliers, q3 + spread, np.inf), counts)
    keep = (values >= low) & (values <= high)  # never empty: Q1..Q3 holds the median
    kept = values[keep]
    kept_counts = np.add.reduceat(keep.astype(np.int64), starts)
    kept_starts = np.cumsum(kept_counts) - kept_counts
    median = segment_quantile(kept, kept_starts, kept_counts, 0.5)
    mean = np.add.reduceat(kept, kept_starts) / kept_counts
    out: Floats = np.where(use_mean, mean, median)
    return out


def _enumerate(x: Floats, y: Floats, a: Ints, b: Ints) -> Floats:
    """Every difference x_i - y_j with a_i <= j < b_i."""
    c = b - a
    rows = np.repeat(np.arange(len(x)), c)
    offsets = np.cumsum(c) - c
    cols = a[rows] + (np.arange(int(c.sum())) - offsets[rows])
    out: Floats = x[rows] - y[cols]
    return out


def _select(x: Floats, y: Floats, k: int, window: int) -> float:
    """The k-th smallest (1-based) difference, for sorted x and y.

    Row i of the implicit matrix holds x_i - y_j, decreasing in j. The candidates of row i are
    columns ``[a_i, b_i)``; columns at or beyond ``b_i`` hold differences known to be smaller than
    the answer (``below`` of them in all). "Difference <= p" is judged as ``y_j >= x_i - p`` so
    that one ``searchsorted`` counts a whole row; that comparison can differ from the computed
    difference by one unit in the last place, so a pivot that eliminates nothing ends the
    narrowing and the (then larger) window is partitioned as is.
    """
    m, n = len(x), len(y)
    a = np.zeros(m, dtype=np.int64)
    b = np.full(m, n, dtype=np.int64)
    below = 0
    while int((b - a).sum()) > window:
        rows = np.flatnonzero(b > a)
        mids = x[rows] - y[(a[rows] + b[rows] - 1) // 2]
        order = np.argsort(mids, kind="stable")
        weights = np.cumsum((b - a)[rows][order])
        pivot = float(mids[order[int(np.searchsorted(weights, weights[-1] / 2))]])
        at_most = np.clip(np.searchsorted(y, x - pivot, side="left"), a, b)
        less = np.clip(np.searchsorted(y, x - pivot, side="right"), a, b)
        n_at_most = int((b - at_most).sum())
        n_less = int((b - less).sum())
        rank = k - below
        if n_less < rank <= n_at_most:
            return pivot
        before = int((b - a).sum())
        if rank <= n_less:
            a = less
        else:
            below += n_at_most
            b = at_most
        if int((b - a).sum()) == before:
            break
    candidates = _enumerate(x, y, a, b)
    index = k - below - 1
    return float(np.partition(candidates, index)[index])


def kth_differences(
    x: Floats, y: Floats, ks: Sequence[int], *, window: int = WINDOW
) -> list[float]:
    """The k-th smallest (1-based) of the pairwise differences ``x_i - y_j``, for each k.

    ``x`` and ``y`` must be sorted ascending and finite.
    """
    total = len(x) * len(y)
    if any(not 1 <= k <= total for k in ks):
        raise ValueError(f"order statistics {list(ks)} out of 1..{total}")
    if total <= window:
        everything = np.subtract.outer(x, y).ravel()
        index = sorted({k - 1 for k in ks})
        picked = np.partition(everything, index)
        return [float(picked[k - 1]) for k in ks]
    return [_select(x, y, k, window) for k in ks]


def shift_interval(
    x: Floats, y: Floats, confidence: float, *, window: int = WINDOW
) -> Shift | None:
    """Hodges-Lehmann shift of x over y with Lehmann's interval; None when the samples are too
    small for an interval at this confidence (C < 1)."""
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        return None
    mn = m * n
    z = float(sps.norm.ppf(0.5 + confidence / 2))
    c = math.floor(mn / 2 + 0.5 - z * math.sqrt(mn * (m + n + 1) / 12))
    if c < 1:
        return None
    ks = [c, mn + 1 - c, (mn + 1) // 2, (mn + 2) // 2]
    low, high, mid_a, mid_b = kth_differences(np.sort(x), np.sort(y), ks, window=window)
    return Shift(estimate=(mid_a + mid_b) / 2, low=low, high=high)


def median_interval(values: Floats, confidence: float) -> tuple[float, float, float] | None:
    """Median and its distribution-free interval ``[X(l), X(n + 1 - l)]`` from the order
    statistics, ``l`` from the binomial(n, 1/2) quantile (the sign-test interval, Hollander,
    Wolfe & Chicken section 3.6); None when n is too small for this confidence."""
    n = len(values)
    if n == 0:
        return None
    v = np.sort(values)
    lo = int(sps.binom.ppf((1 - confidence) / 2, n, 0.5))
    if lo < 1:
        return None
    return float(np.median(v)), float(v[lo - 1]), float(v[n - lo])


def mann_whitney_p(x: Floats, y: Floats) -> float | None:
    """Two-sided Mann-Whitney U p-value (scipy); None when undefined (every value tied)."""
    if len(x) == 0 or len(y) == 0:
        return None
    p = float(sps.mannwhitneyu(x, y, alternative="two-sided").pvalue)
    return min(1.0, max(0.0, p)) if math.isfinite(p) else None


def more_often_p(hits: int, total: int, control_hits: int, control_total: int) -> float:
    """One-sided Fisher exact p-value that the first group hits more often than the control."""
    table = [[hits, total - hits], [control_hits, control_total - control_hits]]
    return float(sps.fisher_exact(table, alternative="greater").pvalue)
