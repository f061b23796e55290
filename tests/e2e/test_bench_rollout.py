"""``lockstep bench rollout`` at a tiny size, as a user runs it: the five service processes
complete a whole rollout on the simulator and the figures the issue names come out. The
updater runs as two processes (``--updaters 2``), as a scaled-out deployment: they share the
nodes' work under fenced leases, and each is measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

LOCKSTEP = str(Path(sys.executable).parent / "lockstep")
NODES = 12


def test_a_tiny_fleet_rolls_out_completely_and_the_figures_are_reported(open_tmp: Path) -> None:
    out = subprocess.run(
        [LOCKSTEP, "bench", "rollout", "--nodes", str(NODES), "--time-scale", "0.02",
         "--updaters", "2", "--data-dir", str(open_tmp / "state"), "--json"],
        capture_output=True, text=True, timeout=220, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout)
    assert {"seconds", "lower_bound_s", "ratio", "cpu_s_per_node", "peak_mb"} <= figures.keys()
    # The rollout completed: every node of every wave ended done, and the waves cover the fleet.
    assert figures["node_ends"] == {"done": NODES}
    assert sum(w["nodes"] for w in figures["waves"]) == NODES
    assert len(figures["waves"]) >= 2  # the canary, then the rest after its gate passed
    # No control plane beats the bound; the ratio is the makespan over it.
    assert figures["seconds"] >= figures["lower_bound_s"] > 0
    assert figures["ratio"] == pytest.approx(figures["seconds"] / figures["lower_bound_s"], 0.01)
    assert figures["lower_bound_s"] == pytest.approx(sum(w["bound_s"] for w in figures["waves"]))
    assert figures["cpu_s_per_node"] > 0
    # The whole machine's busy share holds at least what the five services spent.
    services_share = sum(figures["cpu_s"].values()) / (os.cpu_count() or 1) / figures["seconds"]
    assert services_share - 0.02 <= figures["machine_busy"] <= 1.02
    assert figures["updaters"] == 2
    assert set(figures["cpu_s"]) == {"attest", "inventory", "planner", "updater", "healthgate"}
    assert set(figures["peak_mb"]) == {
        "attest", "inventory", "planner", "updater", "updater-2", "healthgate"
    }  # fmt: skip
    assert all(mb > 10 for mb in figures["peak_mb"].values())
    # --data-dir keeps each service's log.
    assert sorted(p.name for p in (open_tmp / "state" / "logs").glob("*.log")) == [
        "attest.log", "healthgate.log", "inventory.log", "planner.log", "updater-2.log",
        "updater.log",
    ]  # fmt: skip
