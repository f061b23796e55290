"""``Occupancy`` on the simulator's scheduler API: ``GET /scheduler/jobs`` lists the running jobs
and the nodes each is placed on (``lockstep_sim.scheduler.http``); a Slurm site would answer the
same question with ``squeue --states=RUNNING``. Any failure to answer is transient: the worker
keeps the lifecycles it had and asks again on its next pass."""

from __future__ import annotations

import aiohttp

from lockstep_common.errors import TransientError


class SchedulerJobs:
    """Which nodes run a job, from the scheduler API at ``base_url``."""

    def __init__(self, base_url: str, *, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def busy_nodes(self) -> frozenset[str]:
        url = f"{self.base_url}/scheduler/jobs"
        try:
            async with (
                aiohttp.ClientSession(timeout=self._timeout) as http,
                http.get(url) as reply,
            ):
                data = await reply.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise TransientError(f"GET {url}: {exc}") from None
        if reply.status != 200 or not isinstance(data, dict):
            raise TransientError(f"GET {url}: HTTP {reply.status}")
        jobs = data.get("jobs")
        if not isinstance(jobs, list):
            raise TransientError(f"GET {url}: no job list in the answer")
        return frozenset(
            str(node)
            for job in jobs
            if isinstance(job, dict) and isinstance(job.get("nodes"), list)
            for node in job["nodes"]
        )
