"""The executor wired to a simulated fleet: the inventory's answers (``SimFacts``) and an
``Executor`` on the simulator's scheduler API and an unpacked bundle (``sim_executor``).

One wiring for ``lockstep bench update`` and the updater's integration tests, so both measure
and test the same thing. The fleet is described by a small protocol (``lockstep_sim.runtime.
FleetRuntime`` fits it) so that the updater does not depend on the simulator package.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from lockstep_common.events.v1 import FleetNode
from lockstep_updater.adapters.images import BundleImages
from lockstep_updater.adapters.sim_scheduler import SimScheduler
from lockstep_updater.executor import Executor, ExecutorPolicy
from lockstep_updater.ports import Scheduler
from lockstep_updater.store import UpdaterStore


class SimNode(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def site(self) -> str: ...
    @property
    def pool(self) -> str: ...


class SimFleet(Protocol):
    """What the wiring reads of a running simulated fleet."""

    @property
    def fleet(self) -> Sequence[SimNode]: ...
    @property
    def scheduler_url(self) -> str: ...
    def bmc_url(self, node_id: str) -> str: ...


class SimFacts:
    """``NodeFacts`` from the simulated fleet: every node of ``profile``, its BMC reached over
    plain HTTP with the credentials the environment variables ``<credentials>_USERNAME`` and
    ``<credentials>_PASSWORD`` hold (``adapters.credentials``)."""

    def __init__(self, rt: SimFleet, *, credentials: str, profile: str = "gb200") -> None:
        self.nodes = {
            n.id: FleetNode(
                node_id=n.id,
                site=n.site,
                profile=profile,
                pool=n.pool,
                bmc_url=rt.bmc_url(n.id),
                allow_plain_http=True,
                credentials=f"env:{credentials}",
            )
            for n in rt.fleet
        }

    async def node(self, node_id: str) -> FleetNode | None:
        return self.nodes.get(node_id)


def sim_executor(
    rt: SimFleet,
    store: UpdaterStore,
    facts: SimFacts,
    bundle: Path,
    policy: ExecutorPolicy,
    environ: dict[str, str],
    *,
    scheduler: Scheduler | None = None,
) -> Executor:
    """The real executor on ``rt``'s scheduler API (or ``scheduler``), reading images from the
    bundle directory ``bundle``."""
    return Executor(
        store,
        facts,
        scheduler or SimScheduler(rt.scheduler_url),
        BundleImages([bundle.parent]),
        policy,
        environ=environ,
    )
