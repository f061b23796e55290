"""The planner's ``SlurmJobs`` on a private Slurm cluster (the one this folder's fixture runs for
the updater's Slurm adapter: one slurmctld per session): the nodes of running jobs are what
occupies a fabric domain, hostlists are expanded by Slurm itself, and a controller that cannot
be reached is "not now" (the planner keeps the lifecycles it had)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep_common.errors import TransientError
from lockstep_planner.adapters.slurm_jobs import SlurmJobs
from tests.integration.updater.slurm_cluster import SlurmCluster
from tests.integration.updater.test_slurm_scheduler import elsewhere

pytestmark = pytest.mark.integration


def jobs_of(slurm: SlurmCluster, conf: str | None = None, timeout_s: float = 30) -> SlurmJobs:
    return SlurmJobs(conf=conf or str(slurm.conf), environ=slurm.env, timeout_s=timeout_s)


async def test_the_nodes_of_running_jobs_are_busy_and_idle_nodes_are_not(
    slurm: SlurmCluster,
) -> None:
    assert await jobs_of(slurm).busy_nodes() == frozenset()
    first, second, third = slurm.nodes[:3]
    slurm.long_job(first)
    assert await jobs_of(slurm).busy_nodes() == {first}
    # One job over two nodes: squeue says it as a hostlist, scontrol expands it.
    out = slurm.run(
        "sbatch", "--parsable", "-N", "2", "-w", f"{second},{third}", "-o", "/dev/null",
        "--wrap", "sleep 600",
    )  # fmt: skip
    job = out.strip().split(";")[0]
    slurm.submitted.append(job)
    slurm.wait(lambda: slurm.jobs().get(job, ("", ""))[0] == "RUNNING", f"job {job} running")
    assert await jobs_of(slurm).busy_nodes() == {first, second, third}


async def test_a_controller_that_cannot_be_reached_is_transient(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    conf = elsewhere(slurm, tmp_path)
    with pytest.raises(TransientError, match=r"squeue --noheader --states=RUNNING,COMPLETING"):
        await jobs_of(slurm, conf, timeout_s=0.5).busy_nodes()
