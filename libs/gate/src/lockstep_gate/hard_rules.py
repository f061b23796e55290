"""Hard rules: one bad reading on an updated node trips the gate at once, without the soak.

Each rule reads a signal from the same sample table the judge uses (the ingest maps
``HealthObserved`` and ``device.failed`` onto these metric names):

- ``dcgm_diag_passed``: 1 passed, 0 failed. Any failure trips (seed 001: DCGM diagnostics).
- ``xid_<code>``: XID count since the last report. A code in the policy's fatal set trips.
- ``nccl_busbw_gbps`` below ``busbw_factor`` x expected for ``busbw_consecutive`` samples in a
  row trips (seed 001: ~92% of the fabric's expected busbw is the acceptance gate). Expected is the
  node's latest ``nccl_expected_gbps`` reading, else the policy's value for its stratum.
- ``heartbeat``: the agent's report counter. Silence longer than ``heartbeat_missed_intervals``
  intervals (from the window start, between reports, or up to now) trips (seed 003: MegaScale's
  heartbeat timeouts); so does a node of the wave's roster with no sample at all.
- ``gsp_init_failed`` and ``device_failed``: any positive value trips.

Only canary nodes are blamed. The busbw and heartbeat rules are ones a fleet-wide network problem
breaks everywhere, so the environment is consulted when it is suspect: when at least
``environmental_control_fraction`` of the control breaks the rule too, or the caller says the
signal is degraded fleet-wide in that stratum (the judge's environmental check on busbw). Then
the canary trips only if it breaks the rule significantly more often than the control (one-sided
Fisher exact test at ``environmental_alpha``); otherwise the finding is environmental: an
inconclusive gate and a human asked, not a trip.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from lockstep_gate.decision import ENVIRONMENT_SENSITIVE, HardRule, RuleFinding, RuleHit
from lockstep_gate.policy import Policy
from lockstep_gate.samples import DEFAULT_STRATUM, Bools, Floats, Ints, SampleTable
from lockstep_gate.stats import more_often_p, segments

DCGM_DIAG = "dcgm_diag_passed"
XID_PREFIX = "xid_"
BUSBW = "nccl_busbw_gbps"
BUSBW_EXPECTED = "nccl_expected_gbps"
HEARTBEAT = "heartbeat"
GSP_INIT = "gsp_init_failed"
DEVICE_FAILED = "device_failed"
NO_HEARTBEATS = "heartbeat rule not evaluated: no heartbeat samples"


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class _Broken:
    """How one node broke a rule: the reading (None: no sample at all), the rule's threshold,
    the reading's time, and the words that say it."""

    at: float
    value: float | None
    threshold: float
    detail: str


@dataclass(frozen=True)
class _Rows:
    """The rows the rules may read: soak phase, not after ``now``."""

    table: SampleTable
    mask: Bools  # soak rows up to now
    upto: Bools  # rows of either phase up to now

    def of(self, metric: str) -> Ints:
        code = self.table.metric_code(metric)
        if code is None:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(self.mask & (self.table.metric == code))


def _flagged(rows: _Rows, metric: str, hit: str, what: str) -> dict[int, _Broken]:
    """Nodes with a row of ``metric`` that is 0 (``hit="zero"``, against a threshold of 1:
    passed) or positive (``"positive"``, against 0); the first such reading in time is the
    hit."""
    t = rows.table
    idx = rows.of(metric)
    values = t.value[idx]
    bad = values == 0 if hit == "zero" else values > 0  # NaN compares False: not evidence
    idx = idx[bad]
    threshold = 1.0 if hit == "zero" else 0.0
    out: dict[int, _Broken] = {}
    for i in idx[np.argsort(t.time[idx], kind="stable")]:
        at = float(t.time[i])
        if int(t.node[i]) not in out:
            out[int(t.node[i])] = _Broken(
                at, float(t.value[i]), threshold, f"{what} at {_when(at)}"
            )
    return out


def _fatal_xids(rows: _Rows, policy: Policy) -> dict[int, _Broken]:
    out: dict[int, _Broken] = {}
    for code in sorted(set(policy.hard_rules.fatal_xids)):
        for node, detail in _flagged(
            rows, f"{XID_PREFIX}{code}", "positive", f"XID {code}"
        ).items():
            out.setdefault(node, detail)
    return out


def _expected_busbw(rows: _Rows, policy: Policy) -> Floats:
    """Per node: its latest positive expected-busbw reading, else the policy's for its stratum."""
    t = rows.table
    by_stratum = np.array(
        [policy.expected.get(s, {}).get(BUSBW, np.nan) for s in t.strata], dtype=np.float64
    )
    expected = by_stratum[t.node_stratum] if len(t.strata) else np.zeros(0)
    code = t.metric_code(BUSBW_EXPECTED)
    if code is not None:
        idx = np.flatnonzero(rows.upto & (t.metric == code))
        idx = idx[np.isfinite(t.value[idx]) & (t.value[idx] > 0)]
        idx = idx[np.lexsort((t.time[idx], t.node[idx]))]
        if len(idx):
            starts, counts = segments(t.node[idx])
            last = idx[starts + counts - 1]
            expected = expected.copy()
            expected[t.node[last]] = t.value[last]
    return expected


STALE_INTERVALS = 2.0
"""A control node whose last busbw reading is more than this many reporting intervals older than
the newest reading (any node's), and older than the heartbeat rule's silence limit, has stopped
reporting: it does not hold the comparison back (the heartbeat rule and the judge at the soak's
end speak for it)."""


def _control_readings_since(rows: _Rows, patience_s: float) -> Callable[[float], int]:
    """``since(t)``: the fewest busbw readings any control node still reporting has taken at
    or after ``t`` (a large number when there is no such control to wait for).

    Readings arrive node by node: when the network degrades everywhere at once, a canary node
    can show ``busbw_consecutive`` low readings before the control nodes have taken as many
    since the drop. Judged at that instant the canary looks worse than its control only because
    its reports came first, and an environmental problem would trip the gate (reliability.md
    7.F5, seen in CI). So a canary's breach counts once every control node has taken as many
    readings since the breach began: then both sides had the same chance to show it.
    """
    t = rows.table
    every = rows.of(BUSBW)
    every = every[np.isfinite(t.value[every])]
    idx = every[~t.node_canary[t.node[every]]]
    idx = idx[np.lexsort((t.time[idx], t.node[idx]))]
    if not len(idx):
        return lambda since: np.iinfo(np.int64).max
    node, time = t.node[idx], t.time[idx]
    gaps = np.diff(time)[node[1:] == node[:-1]]
    # No control with two readings yet is no reason to stop waiting: the ingest check's window
    # begins when the wave was planned, so one report into a fleet-wide drop every control has
    # one (low) reading. An ingest batch that ended just after a canary node's second report
    # then found "no control to wait for" and tripped the gate on it alone (reliability.md
    # 7.F5; the health-scenario test, 1 run in ~40: "1 of 5 canary, control 0 of 5"). Without
    # an interval to measure, the heartbeat limit alone tells late from silent.
    interval = float(np.median(gaps)) if len(gaps) else 0.0
    starts, counts = segments(node)
    latest = time[starts + counts - 1]
    newest = float(t.time[every].max())
    live = [
        time[s : s + c]
        for s, c, last in zip(starts, counts, latest, strict=True)
        # Within the heartbeat limit a control is late, not silent: reports reach the gate
        # unevenly (a site's link, an agent's publish retries, ingest batches), and controls
        # judged silent after two intervals let a fleet-wide drop trip the gate on the canary
        # alone.
        if last > newest - max(STALE_INTERVALS * interval, patience_s)
    ]
    if not live:
        return lambda since: np.iinfo(np.int64).max
    return lambda since: min(len(r) - int(np.searchsorted(r, since)) for r in live)


def _busbw(rows: _Rows, policy: Policy) -> dict[int, _Broken]:
    t = rows.table
    idx = rows.of(BUSBW)
    idx = idx[np.isfinite(t.value[idx])]
    need = policy.hard_rules.busbw_consecutive
    if len(idx) < need:
        return {}
    factor = policy.hard_rules.busbw_factor
    bar = factor * _expected_busbw(rows, policy)
    idx = idx[np.lexsort((t.time[idx], t.node[idx]))]
    node, value, time = t.node[idx], t.value[idx], t.time[idx]
    below = value < bar[node]  # NaN bar (no expected value): not evidence
    run = np.concatenate(([0], np.cumsum(below)))
    full = (run[need:] - run[:-need]) == need
    full &= node[need - 1 :] == node[: len(node) - need + 1]  # the run stays on one node
    first = np.flatnonzero(full)
    if len(first) == 0:
        return {}
    starts, _ = segments(node)
    lowest = np.minimum.reduceat(np.where(below, value, np.inf), starts)
    lowest_of = dict(zip(node[starts].tolist(), lowest.tolist(), strict=True))
    hard = policy.hard_rules
    since = _control_readings_since(
        rows, hard.heartbeat_interval_s * hard.heartbeat_missed_intervals
    )
    out: dict[int, _Broken] = {}
    for i in first:
        n = int(node[i])
        if t.node_canary[n] and since(float(time[i])) < need:
            continue  # the control has not taken as many readings since: judged on a later batch
        if n not in out:
            out[n] = _Broken(
                float(time[i]),
                float(value[i]),
                float(bar[n]),
                f"busbw {lowest_of[n]:.1f} below {factor:g} x {bar[n] / factor:.1f} = "
                f"{bar[n]:.1f} in {need} consecutive sample(s) from {_when(float(time[i]))}",
            )
    return out


def _heartbeats(rows: _Rows, policy: Policy, now: float) -> tuple[dict[int, _Broken], bool]:
    """Silent nodes, and whether the samples carry heartbeats at all."""
    t = rows.table
    idx = rows.of(HEARTBEAT)
    if len(idx) == 0:
        return {}, False
    limit = policy.hard_rules.heartbeat_interval_s * policy.hard_rules.heartbeat_missed_intervals
    start = float(t.time[rows.mask].min())
    idx = idx[np.lexsort((t.time[idx], t.node[idx]))]
    node, time = t.node[idx], t.time[idx]
    starts, counts = segments(node)
    previous = np.concatenate(([start], time[:-1]))
    previous[starts] = start  # a node's first heartbeat is measured from the window start
    worst_inside = np.maximum.reduceat(time - previous, starts)
    last = time[starts + counts - 1]
    worst = np.maximum(worst_inside, now - last)
    out: dict[int, _Broken] = {}
    for i in np.flatnonzero(worst > limit):
        s, c = int(starts[i]), int(counts[i])
        # The silence began at the last heartbeat, or at the start of the longest gap.
        began = float(last[i])
        if worst_inside[i] > now - last[i]:
            began = float(previous[s + int(np.argmax((time - previous)[s : s + c]))])
        out[int(node[s])] = _Broken(
            began,
            float(worst[i]),
            limit,
            f"silent for {worst[i]:.0f} s (limit {limit:g} s); last heartbeat at "
            f"{_when(float(last[i]))}",
        )
    reporting = set(node[starts].tolist())
    live = set(t.node[rows.mask].tolist())
    for n in sorted(live - reporting):
        out[n] = _Broken(start, now - start, limit, "no heartbeat in the window")
    return out, True


def check_hard_rules(
    table: SampleTable,
    policy: Policy,
    *,
    now: float,
    roster: Collection[str] | Mapping[str, str] = (),
    degraded: Mapping[HardRule, Collection[str]] | None = None,
) -> tuple[tuple[RuleFinding, ...], tuple[str, ...]]:
    """Findings of the rules broken by canary nodes, and notes on rules that could not be
    evaluated. ``roster``: the wave's canary nodes (or node -> stratum, so a node with no
    sample at all is compared with the control of its own stratum); one with no sample is silent.
    ``degraded``: per rule, strata where its signal is known to be degraded fleet-wide."""
    upto = table.time <= now
    rows = _Rows(table, upto & ~table.baseline, upto)
    broken: dict[HardRule, dict[int, _Broken]] = {
        HardRule.DCGM_DIAG: _flagged(rows, DCGM_DIAG, "zero", "DCGM diagnostic failed"),
        HardRule.FATAL_XID: _fatal_xids(rows, policy),
        HardRule.BUSBW: _busbw(rows, policy),
        HardRule.GSP_INIT: _flagged(rows, GSP_INIT, "positive", "GSP initialisation failed"),
        HardRule.DEVICE_FAILED: _flagged(rows, DEVICE_FAILED, "positive", "device failed"),
    }
    notes: list[str] = []
    silent, have_heartbeats = _heartbeats(rows, policy, now) if rows.mask.any() else ({}, False)
    broken[HardRule.HEARTBEAT] = silent
    if not have_heartbeats:
        notes.append(NO_HEARTBEATS)
    unseen = sorted(set(roster) - set(table.nodes))
    strata = dict(roster) if isinstance(roster, Mapping) else {}
    context = _Context(table, policy, degraded or {}, strata, now)
    findings = [
        f
        for rule in HardRule
        for f in context.findings(rule, broken[rule], unseen if rule is HardRule.HEARTBEAT else [])
    ]
    return tuple(findings), tuple(notes)


@dataclass(frozen=True)
class _Context:
    table: SampleTable
    policy: Policy
    degraded: Mapping[HardRule, Collection[str]]
    unseen_strata: Mapping[str, str]  # roster node -> its stratum, when the caller knows it
    now: float  # when a node with no sample at all is judged silent

    def stratum_of(self, node: str) -> str:
        """Where a node with no sample is compared: its own stratum, else the default."""
        return self.unseen_strata.get(node, DEFAULT_STRATUM)

    def findings(
        self, rule: HardRule, broken: dict[int, _Broken], unseen: list[str]
    ) -> list[RuleFinding]:
        """One finding per stratum where canary nodes break the rule."""
        t = self.table
        out = []
        for s, stratum in enumerate(t.strata if len(t.nodes) else ()):
            in_stratum = t.node_stratum == s
            canary = np.flatnonzero(in_stratum & t.node_canary)
            control = np.flatnonzero(in_stratum & ~t.node_canary)
            extra = [n for n in unseen if self.stratum_of(n) == stratum]
            hits = [int(n) for n in canary if int(n) in broken]
            if hits or extra:
                out.append(self._finding(rule, stratum, hits, len(canary), control, broken, extra))
        elsewhere: dict[str, list[str]] = {}
        for n in unseen:
            if self.stratum_of(n) not in (t.strata if len(t.nodes) else ()):
                elsewhere.setdefault(self.stratum_of(n), []).append(n)
        none = np.zeros(0, dtype=np.int64)
        for stratum, names in sorted(elsewhere.items()):
            out.append(self._finding(rule, stratum, [], 0, none, broken, names))
        return out

    def _finding(
        self,
        rule: HardRule,
        stratum: str,
        hits: list[int],
        canary_total: int,
        control: Ints,
        broken: dict[int, _Broken],
        unseen: list[str],
    ) -> RuleFinding:
        t = self.table
        names = [t.nodes[n] for n in hits] + unseen
        details = [f"{t.nodes[n]}: {broken[n].detail}" for n in hits] + [
            f"{n}: no sample at all in the window" for n in unseen
        ]
        hard = self.policy.hard_rules
        limit = hard.heartbeat_interval_s * hard.heartbeat_missed_intervals
        found = [
            RuleHit(
                node=t.nodes[n],
                at=broken[n].at,
                value=broken[n].value,
                threshold=broken[n].threshold,
                detail=broken[n].detail,
            )
            for n in hits
        ] + [
            RuleHit(
                node=n,
                at=self.now,
                value=None,
                threshold=limit,
                detail="no sample at all in the window",
            )
            for n in unseen
        ]
        total = canary_total + len(unseen)
        control_hits = sum(1 for n in control.tolist() if n in broken)
        share = control_hits / len(control) if len(control) else 0.0
        suspect = rule in ENVIRONMENT_SENSITIVE and (
            share >= self.policy.hard_rules.environmental_control_fraction
            or stratum in self.degraded.get(rule, ())
        )
        environmental, p = False, None
        if suspect:
            p = more_often_p(len(names), total, control_hits, len(control))
            environmental = p >= self.policy.hard_rules.environmental_alpha
        head = f"{len(names)} of {total} canary node(s)"
        if len(control):
            head += f"; control {control_hits} of {len(control)}"
        if p is not None:
            head += f" (one-sided Fisher p={p:.3g})"
        shown = "; ".join(details[:5]) + (
            f"; ... {len(details) - 5} more" if len(details) > 5 else ""
        )
        return RuleFinding(
            rule=rule,
            stratum=stratum,
            nodes=tuple(sorted(names)),
            canary_nodes=total,
            control_hits=control_hits,
            control_nodes=len(control),
            environmental=environmental,
            p_value=p,
            detail=f"{head}: {shown}",
            hits=tuple(sorted(found, key=lambda h: (h.at, h.node))),
        )
