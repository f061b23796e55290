"""``lockstep bench agent --xid``, small: two agents at the production 10 s cadence, each on a
canary of a wave of its own, on the session's NATS and PostgreSQL with the real healthgate; the
XID line written into an agent's kernel log trips its wave well before the agent's next cycle,
and the baseline (the same report published straight) is measured beside it."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep_bench.agent_xid import GOAL_P99_S, one_run

pytestmark = pytest.mark.integration


async def test_an_xid_line_trips_the_gate_within_the_goal(servers: Any) -> None:
    out = await one_run(servers.nats_url, servers.database_url, trials=2)
    assert out["xid_trials"] == 2
    assert 0 < out["xid_to_trip_p50_ms"] <= out["xid_to_trip_p99_ms"] < GOAL_P99_S * 1000
    assert 0 < out["direct_report_to_trip_p50_ms"] <= out["direct_report_to_trip_p99_ms"]
    assert out["xid_ratio_p50"] > 0
