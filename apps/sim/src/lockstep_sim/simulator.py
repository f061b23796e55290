"""The in-process simulator: a fleet, its BMCs and one aiohttp runner listening on one port
on every node's loopback address."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from lockstep_sim.bmc import Bmc
from lockstep_sim.dialects import dialect_named, rename_members
from lockstep_sim.drifts import DriftControl
from lockstep_sim.faults import FaultPlan
from lockstep_sim.fleet import Node, build_fleet
from lockstep_sim.injection import FaultControl
from lockstep_sim.listening import ALL_INTERFACES, bind_all, bind_ports, serve_on
from lockstep_sim.options import SimOptions
from lockstep_sim.server import build_app
from lockstep_sim.started import Started


class Simulator(Started):
    """``async with Simulator(SimOptions(2)) as sim: sim.bmc_url("node-00000")``.

    ``port=0`` picks a free port on the first address and reuses it for the others; with
    ``advertise``, each BMC has its own port on every interface instead (``SimOptions``).
    """

    def __init__(self, options: SimOptions) -> None:
        o = options
        self.fleet: list[Node] = build_fleet(o.nodes, o.profile, o.seed, o.host_base)
        for node in self.fleet:
            rename_members(node, dialect_named(o.dialect))
        self.faults = FaultControl(o.faults)  # shared by every BMC; replaced by PUT /faults
        self.bmcs = {
            n.address: Bmc(
                n,
                o.username,
                o.password,
                o.time_scale,
                faults=self.faults,
                multipart_push=o.multipart_push,
                dialect=dialect_named(o.dialect),
            )
            for n in self.fleet
        }
        self.by_id = {n.id: n for n in self.fleet}
        # Drift scenarios (POST /scenario); FleetRuntime attaches the node agents' software.
        self.drifts = DriftControl(
            self.fleet, {n.id: self.bmcs[n.address] for n in self.fleet}, self.faults
        )
        self.port = o.port
        self.advertise = o.advertise
        self.ports: dict[str, int] = {}
        """Node id -> its BMC's own port (with ``advertise``; empty otherwise)."""
        self.latency_ms = o.latency_ms
        self.startup_seconds = 0.0
        self._runner: web.AppRunner | None = None

    def set_faults(self, plan: FaultPlan | None) -> None:
        """Replace the fault plan at runtime (None clears it); as ``PUT /faults`` does."""
        self.faults.replace(plan or FaultPlan())

    def bmc_url(self, node_id: str) -> str:
        if self.advertise is not None:
            return f"http://{self.advertise}:{self.ports[node_id]}"
        return f"http://{self.by_id[node_id].address}:{self.port}"

    def bmc(self, node_id: str) -> Bmc:
        return self.bmcs[self.by_id[node_id].address]

    @property
    def listening(self) -> str:
        """Where the BMCs listen, in words: one port of many loopback addresses, or many
        ports of the advertised host."""
        if self.advertise is not None:
            ports = sorted(self.ports.values())
            return f"on ports {ports[0]}-{ports[-1]} of {self.advertise} (every interface)"
        return f"on port {self.port} from {self.fleet[0].address}"

    @property
    def base_url(self) -> str:
        return self.bmc_url(self.fleet[0].id)

    def fleet_summary(self) -> list[dict[str, Any]]:
        if self.advertise is not None:
            return [n.summary(self.ports[n.id], self.advertise) for n in self.fleet]
        return [n.summary(self.port) for n in self.fleet]

    async def start(self) -> None:
        started = time.perf_counter()
        by_port = {}
        if self.advertise is None:
            socks, self.port = bind_all([n.address for n in self.fleet], self.port)
        else:
            socks = bind_ports(ALL_INTERFACES, self.port, len(self.fleet))
            self.ports = {n.id: s.getsockname()[1] for n, s in zip(self.fleet, socks, strict=True)}
            self.port = self.ports[self.fleet[0].id]
            by_port = {self.ports[n.id]: self.bmcs[n.address] for n in self.fleet}
        app = build_app(self.bmcs, self.fleet_summary(), self.latency_ms, self.drifts, by_port)
        self._runner = await serve_on(app, socks)
        self.startup_seconds = time.perf_counter() - started

    async def stop(self) -> None:
        for bmc in self.bmcs.values():
            for timer in bmc.timers:
                timer.cancel()
            for runner in list(bmc.runners):
                runner.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
