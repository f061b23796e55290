"""The live side of fault injection: a shared, replaceable plan and a wake-up for waiters.

``FaultControl`` is shared by every BMC of a simulator; ``PUT /faults`` replaces its plan and
wakes hung requests and stuck tasks so that they re-check whether their fault still applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct

from aiohttp import web

from lockstep_sim.faults import Fault, FaultPlan, FaultState


class FaultControl:
    def __init__(self, plan: FaultPlan | None = None) -> None:
        self.state = FaultState()
        self.state.replace(plan or FaultPlan())
        self._changed = asyncio.Event()

    @property
    def plan(self) -> FaultPlan:
        return self.state.plan

    def replace(self, plan: FaultPlan) -> None:
        self.state.replace(plan)
        self._wake()

    def add(self, fault: Fault) -> None:
        """Add one fault to the live plan (see ``FaultState.add``)."""
        self.state.add(fault)
        self._wake()

    def discard(self, fault: Fault) -> bool:
        """Remove one fault and wake its waiters, so a hung request is answered at once."""
        removed = self.state.discard(fault)
        self._wake()
        return removed

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def active(self, fault: Fault) -> bool:
        return self.state.active(fault)

    async def wait_cleared(self, fault: Fault, limit_s: float | None = None) -> bool:
        """Wait until ``fault`` leaves the plan; False when ``limit_s`` seconds pass first."""
        loop = asyncio.get_running_loop()
        end = None if limit_s is None else loop.time() + limit_s
        while self.active(fault):
            left = None if end is None else end - loop.time()
            if left is not None and left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return True


def reset_connection(request: web.Request) -> None:
    """Drop the connection with a TCP RST and no HTTP response (SO_LINGER 0, then abort)."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
