"""The planner's gauges, read from its tables (``lockstep_common.query_gauges``): rollouts and
waves by state, and how long each running rollout has gone without progress."""

from __future__ import annotations

from lockstep_common.query_gauges import QueryGauge
from lockstep_planner.domain.rollout import RolloutState, WaveState

# Rollouts a human or the planner still acts on; aborted and completed ones are history.
_OPEN = ", ".join(
    f"'{s}'"
    for s in (RolloutState.PLANNED, RolloutState.RUNNING, RolloutState.PAUSED, RolloutState.HALTED)
)

GAUGES = (
    QueryGauge(
        "lockstep_planner_rollouts",
        "Rollouts by state (dry runs are plans looked at, not rollouts: not counted)",
        "SELECT state, count(*) FROM rollouts WHERE NOT dry_run GROUP BY state",
        labels=("state",),
        fill=tuple((s.value,) for s in RolloutState),
    ),
    QueryGauge(
        "lockstep_planner_waves",
        "Waves of rollouts not yet aborted or completed, by state (tripped: awaiting a human)",
        "SELECT w.state, count(*) FROM waves w JOIN rollouts r USING (rollout_id)"
        f" WHERE r.state IN ({_OPEN}) GROUP BY w.state",
        labels=("state",),
        fill=tuple((s.value,) for s in WaveState),
    ),
    QueryGauge(
        "lockstep_planner_rollout_idle_seconds",
        "Seconds since a running rollout last moved: a state change, a wave released, a node"
        " step seen; 0 while a wave soaks (waiting on purpose)",
        # GREATEST and LEAST skip NULLs; a soaking wave with its soak ahead counts as now.
        "SELECT r.rollout_id, extract(epoch FROM now() - GREATEST(r.updated_at,"
        " (SELECT max(GREATEST(w.released_at, CASE WHEN w.state = 'soaking'"
        " THEN LEAST(w.soak_until, now()) END)) FROM waves w WHERE w.rollout_id = r.rollout_id),"
        " (SELECT max(n.step_at) FROM rollout_nodes n WHERE n.rollout_id = r.rollout_id)))"
        " FROM rollouts r WHERE r.state = 'running'",
        labels=("rollout",),
    ),
)
