"""Stragglers outside rollouts, judged continuously (issue 11, deliverable 6).

Every ``straggler_interval_s``: each node's medians over the last ``straggler_window_s`` from the
samples the healthgate already keeps (nodes of waves being updated or soaked left out: those are
the gate's), its profile, site and versions from the inventory (``fleet.query``: the healthgate
reads no other service's tables), then ``domain.stragglers``. A profile whose set of stragglers
changed is announced as ``drift.stragglers.<profile>`` (an empty set once they recovered) and
recorded, in one transaction; an unchanged one only has its record refreshed. Two healthgate
processes take turns (``take_straggler_turn``), so a change is announced once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from lockstep_common import subjects
from lockstep_common.clock import SYSTEM_CLOCK, Clock
from lockstep_common.db import OUTAGE
from lockstep_common.errors import TransientError
from lockstep_common.events.v1 import (
    FleetNode,
    ScopeSelector,
    SharedVersion,
    Straggler,
    StragglersFlagged,
)
from lockstep_common.periodic import Every
from lockstep_common.service import Resources
from lockstep_healthgate.domain.stragglers import (
    NodeWindow,
    ProfileFinding,
    StragglerRules,
    find_stragglers,
)
from lockstep_healthgate.store import GateStore

log = logging.getLogger(__name__)


class FleetSource(Protocol):
    async def nodes(self, scope: ScopeSelector | None) -> list[FleetNode]: ...


@dataclass(frozen=True, slots=True)
class StragglerConfig:
    interval_s: float
    window_s: float
    fleet_timeout_s: float
    rules: StragglerRules = field(default_factory=StragglerRules)


def flagged_event(finding: ProfileFinding, *, window_s: float, at: datetime) -> StragglersFlagged:
    """The announcement of one profile's finding."""
    return StragglersFlagged(
        profile=finding.profile,
        evaluated_at=at,
        window_s=max(1, round(window_s)),
        nodes=finding.nodes,
        stragglers=tuple(
            Straggler(
                node_id=o.node_id,
                site=o.site,
                metric=o.signal,
                value=round(o.value, 3),
                peer_median=round(o.peer_median, 3),
                deviations=round(o.deviations, 2),
            )
            for o in finding.outliers
        ),
        shared_versions=tuple(
            SharedVersion(
                component=s.component,
                version=s.version,
                stragglers_with=s.stragglers_with,
                stragglers=s.stragglers,
                peers_with=s.peers_with,
                peers=s.peers,
                p_value=s.p_value,
            )
            for s in finding.shared[:64]
        ),
    )


async def evaluate_once(
    store: GateStore, fleet: FleetSource, config: StragglerConfig, *, now: datetime
) -> list[StragglersFlagged]:
    """One evaluation; returns what it announced."""
    registered = {n.node_id: n for n in await fleet.nodes(None)}
    since = now - timedelta(seconds=config.window_s)
    announced: list[StragglersFlagged] = []
    async with store.transaction() as tx:
        await tx.take_straggler_turn()
        medians = await tx.node_medians(config.rules.signals, since, now)
        windows = [
            NodeWindow(
                node_id,
                node.site,
                node.profile,
                values,
                dict(node.observed),
            )
            for node_id, values in sorted(medians.items())
            if (node := registered.get(node_id)) is not None
        ]
        for finding in find_stragglers(windows, config.rules):
            event = flagged_event(finding, window_s=config.window_s, at=now)
            before = await tx.flagged(finding.profile)
            now_flagged = finding.straggler_ids
            if now_flagged != (before or frozenset()):
                tx.events.emit(
                    subjects.drift_stragglers(finding.profile), event, about=finding.profile
                )
                announced.append(event)
            await tx.save_flagged(finding.profile, now_flagged, event.model_dump(mode="json"), now)
    for event in announced:
        log.info(
            "stragglers of %s: %d of %d node(s)%s",
            event.profile,
            len(event.stragglers),
            event.nodes,
            "".join(
                f"; share {s.component} {s.version} ({s.stragglers_with}/{s.stragglers}, "
                f"peers {s.peers_with}/{s.peers})"
                for s in event.shared_versions[:3]
            ),
        )
    return announced


class StragglerWatch:
    """A ``lockstep_common.service.Worker`` running :func:`evaluate_once` every interval."""

    def __init__(
        self,
        config: StragglerConfig,
        *,
        store: Callable[[Resources], GateStore],
        fleet: Callable[[Resources], FleetSource],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._config = config
        self._clock = clock
        self._store = store
        self._fleet = fleet

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        """Evaluate until stopped (never when the interval is 0)."""
        if self._config.interval_s <= 0:
            return
        fleet = self._fleet(resources)
        store = self._store(resources)
        # First wait: a window of samples has to gather, and the inventory to come up.
        every = Every(
            self._config.interval_s,
            what="straggler evaluation",
            wait_first=True,
            expected=(TransientError, *OUTAGE),
        )
        await every.run(
            lambda: evaluate_once(store, fleet, self._config, now=self._clock.now()), stopping
        )
