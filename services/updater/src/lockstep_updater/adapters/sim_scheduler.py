"""The ``Scheduler`` port on the simulator's scheduler API (``lockstep_sim.scheduler.http``).

A drain is made with ``by`` = ``ports.OWNER``; the API refuses (409) to drain a node someone
else drained and to resume another's drain without ``force``, which this adapter never sends:
a foreign drain and its reason stay untouched (issue 12). 429 and 5xx are "not now"
(``TransientError``): the executor retries the step later.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from lockstep_updater.ports import OWNER, DrainState, ForeignDrain, SchedulerUnavailable


class SimScheduler:
    """``Scheduler`` over HTTP at ``base_url`` (e.g. ``http://127.0.0.1:8001``)."""

    def __init__(self, base_url: str, *, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def _call(
        self, method: str, node_id: str, action: str = "", body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """``method`` on one node (``node_id``), or on the node list when it is empty."""
        url = f"{self.base_url}/scheduler/nodes"
        url += f"/{node_id}{'/' + action if action else ''}" if node_id else ""
        try:
            async with (
                aiohttp.ClientSession(timeout=self._timeout) as http,
                http.request(method, url, json=body) as reply,
            ):
                data = await reply.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise SchedulerUnavailable(f"{method} {url}: {exc}") from None
        if reply.status == 429 or reply.status >= 500:
            raise SchedulerUnavailable(f"{method} {url}: HTTP {reply.status}")
        return reply.status, data if isinstance(data, dict) else {}

    async def own_drains(self) -> list[str]:
        status, data = await self._call("GET", "")
        nodes = data.get("nodes") if status == 200 else None
        if not isinstance(nodes, list):
            raise SchedulerUnavailable(f"node list: HTTP {status}: {data.get('error')}")
        return [
            str(n["id"])
            for n in nodes
            if isinstance(n, dict)
            and isinstance(n.get("drain"), dict)
            and n["drain"].get("by") == OWNER
        ]

    async def cordon(self, node_id: str, reason: str) -> None:
        status, data = await self._call("POST", node_id, "drain", {"reason": reason, "by": OWNER})
        if status == 409:
            raise ForeignDrain(str(data.get("error", "drained by someone else")))
        if status != 200:
            raise SchedulerUnavailable(f"drain {node_id}: HTTP {status}: {data.get('error')}")

    async def drain_state(self, node_id: str) -> DrainState:
        status, data = await self._call("GET", node_id)
        if status != 200:
            raise SchedulerUnavailable(f"node {node_id}: HTTP {status}: {data.get('error')}")
        drain = data.get("drain")
        if not isinstance(drain, dict) or drain.get("by") != OWNER:
            return DrainState.NOT_DRAINED
        return DrainState.DRAINED if data.get("state") == "drained" else DrainState.DRAINING

    async def resume(self, node_id: str) -> bool:
        if await self.drain_state(node_id) is DrainState.NOT_DRAINED:
            return False  # nothing of ours: a foreign drain keeps its owner and reason
        status, data = await self._call("POST", node_id, "resume", {"by": OWNER})
        if status == 409:
            return False
        if status != 200:
            raise SchedulerUnavailable(f"resume {node_id}: HTTP {status}: {data.get('error')}")
        return True
