"""The updater's gauges, read from its tables (``lockstep_common.query_gauges``): nodes per
step, how long the longest-waiting node has been in each step, and pushes sent, over the
waves in progress (released and not yet completed); and the nodes left quarantined."""

from __future__ import annotations

from lockstep_common.query_gauges import QueryGauge
from lockstep_updater.domain.steps import TERMINAL, NodeStep

# Steps a node can be stuck in: pending waits for a worker and the budget, an end is an end.
_RUNNING = ", ".join(f"'{s}'" for s in NodeStep if s is not NodeStep.PENDING and s not in TERMINAL)

GAUGES = (
    QueryGauge(
        "lockstep_updater_nodes",
        "Nodes of the waves in progress, by the step they are in (or the end they reached)",
        "SELECT w.state, count(*) FROM node_work w JOIN waves v USING (rollout_id, wave)"
        " WHERE v.completed_at IS NULL GROUP BY w.state",
        labels=("step",),
        fill=tuple((s.value,) for s in NodeStep),
    ),
    QueryGauge(
        "lockstep_updater_step_age_seconds",
        "How long the node longest in this step has been in it (preflight: since its wave"
        " was released)",
        # A node entered its step when the step before it ended (node_steps records the step
        # that ran and the state it led to); retries of the same step do not restart the clock.
        "SELECT w.state, max(extract(epoch FROM now() - COALESCE(("
        "SELECT max(s.ended_at) FROM node_steps s WHERE s.node_id = w.node_id"
        " AND s.work_id = w.id AND s.outcome = w.state AND s.step <> w.state), v.released_at)))"
        " FROM node_work w JOIN waves v USING (rollout_id, wave)"
        f" WHERE w.state IN ({_RUNNING}) GROUP BY w.state",
        labels=("step",),
    ),
    QueryGauge(
        "lockstep_updater_quarantined_nodes",
        "Nodes whose latest work item ended quarantined: kept out of service until repaired"
        " and released (lockstep node release)",
        # Any rollout's or remedy's, finished waves too: a quarantine outlives its wave.
        "SELECT count(*) FROM node_work w WHERE w.state = 'quarantined' AND NOT EXISTS ("
        "SELECT 1 FROM node_work l WHERE l.node_id = w.node_id AND l.id > w.id)",
    ),
    QueryGauge(
        "lockstep_updater_open_wave_pushed_images",
        "Component images pushed to BMCs in the waves in progress (each at most once)",
        "SELECT count(*) FROM node_work w JOIN waves v USING (rollout_id, wave),"
        " jsonb_each(w.progress -> 'components') c"
        " WHERE v.completed_at IS NULL AND (c.value ->> 'sent')::boolean",
    ),
)
