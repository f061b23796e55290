"""One Redfish session per node for its whole update (issue 28 item 3), not one per step.

A step borrows its node's session (``NodeSessions.borrow``); the first borrow logs in, the
later ones reuse the token, so a node pays one login and one logout however many steps it runs
(each login is a password check on the BMC, and DSP0266 §13.3 lets a BMC cap its sessions).
A 401 inside the session means the BMC forgot it (it rebooted, or the session timed out,
DSP0266 "Session lifetime"): :class:`KeptSession` logs in again once and repeats the request,
which the BMC refused before acting on it. The executor logs the session out when the node's
item ends, when its claim is lost, and when the worker stops; at most ``limit`` sessions stay
open in one process, the longest unused logged out first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from lockstep_common.events.v1 import FleetNode
from lockstep_redfish import BmcTarget, RedfishClient
from lockstep_redfish.profile import LoginMethod
from lockstep_redfish.session import BmcSession
from lockstep_redfish.transport import Body, Reply
from lockstep_updater.domain.progress import FirmwareProgress, Progress
from lockstep_updater.steps.lease_fence import fence_write

READS = frozenset({"GET", "HEAD"})


class KeptSession(BmcSession):
    """A :class:`BmcSession` that outlives one step: a 401 logs in again, once per request."""

    def __init__(self, client: RedfishClient, target: BmcTarget) -> None:
        super().__init__(client, target)
        self._relogin = asyncio.Lock()
        self.logins = 0
        """Logins of this session, the first included (what a node paid for its session)."""
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        """The first login (``NodeSessions.borrow`` starts it)."""

    async def open(self) -> None:
        self.logins += 1
        await super().open()

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any] | None = None,
        data: Body | None = None,
        headers: dict[str, str] | None = None,
        retries: int | None = None,
        timeout_s: float | None = None,
    ) -> Reply:
        sent_with = self._token
        kwargs: dict[str, Any] = {
            "json_body": json_body,
            "data": data,
            "headers": headers,
            "retries": retries,
            "timeout_s": timeout_s,
        }
        if method not in READS:
            fence_write()  # not after this worker's lease may have lapsed (lease_fence)
        reply = await super().request(method, path, **kwargs)
        if reply.status != 401:
            return reply
        async with self._relogin:  # concurrent borrowers hitting the same 401 log in once
            if self._token == sent_with:
                self.logins += 1
                await self.reopen()
        if method not in READS:
            fence_write()
        return await super().request(method, path, **kwargs)


class NodeSessions:
    """The open session of each node this process works on (see the module docstring)."""

    def __init__(self, client: RedfishClient, *, limit: int = 512) -> None:
        self.client = client
        self.limit = limit
        self._open: OrderedDict[str, KeptSession] = OrderedDict()
        self._borrowed: dict[str, int] = {}
        self._closing: set[str] = set()
        self.pushed: dict[str, float] = {}
        """The wall time of the last push this process sent to each BMC (by URL), whatever
        work item sent it: the profile's gap between pushes holds across items (``steps.push``)."""

    def __len__(self) -> int:
        return len(self._open)

    def get(self, node_id: str) -> KeptSession | None:
        return self._open.get(node_id)

    @contextlib.asynccontextmanager
    async def borrow(self, target: BmcTarget) -> AsyncIterator[KeptSession]:
        """The node's session, logged in on first use; it stays open after the block. A
        node whose BMC moved (another url, or plain http no longer allowed) gets a new one."""
        node_id = target.node_id
        session = self._open.get(node_id)
        if session is not None and session.target != target:
            await self._logout(node_id)
            session = None
        if session is None:
            session = KeptSession(self.client, target)
            session.opened = asyncio.ensure_future(session.open())
            self._open[node_id] = session
        self._open.move_to_end(node_id)
        self._borrowed[node_id] = self._borrowed.get(node_id, 0) + 1
        try:
            # Borrowers of a session still logging in wait for that one login.
            await asyncio.shield(session.opened)
            yield session
        except BaseException:
            if session.opened.done() and session.opened.exception() is not None:
                self._closing.add(node_id)  # a login that failed: nothing to keep
            raise
        finally:
            self._borrowed[node_id] -= 1
            if not self._borrowed[node_id]:
                del self._borrowed[node_id]
                if node_id in self._closing:
                    await self._logout(node_id)
            await self._trim()

    async def close(self, node_id: str) -> None:
        """Log the node's session out now, or when its last borrower gives it back."""
        if self._borrowed.get(node_id):
            self._closing.add(node_id)
        else:
            await self._logout(node_id)

    async def _logout(self, node_id: str) -> None:
        self._closing.discard(node_id)
        session = self._open.pop(node_id, None)
        if session is not None:
            with contextlib.suppress(BaseException):
                await session.opened  # its login ended (a failed one still needs its close)
            await session.close()

    async def close_all(self) -> None:
        """Log out every session (the worker stops)."""
        for node_id in list(self._open):
            await self._logout(node_id)

    async def _trim(self) -> None:
        # One at a time, the longest unused first, chosen again after each logout: a step may
        # borrow a session while another is being logged out (a list taken before the first
        # logout closed sessions borrowed meanwhile, under their requests).
        while len(self._open) > self.limit:
            idle = next((n for n in self._open if not self._borrowed.get(n)), None)
            if idle is None:
                return
            await self._logout(idle)


def bmc_target(node: FleetNode, progress: Progress | None = None) -> BmcTarget:
    """The node's BMC, logged in to as ``progress`` recorded (``FirmwareProgress.bmc_login``)."""
    login = progress.bmc_login if isinstance(progress, FirmwareProgress) else None
    return BmcTarget(
        node.node_id,
        node.bmc_url,
        allow_plain_http=node.allow_plain_http,
        login=LoginMethod(login or LoginMethod.SESSION),
    )
