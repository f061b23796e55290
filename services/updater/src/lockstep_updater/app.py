"""Composition root of the updater service: the only place its dependencies are built."""

from __future__ import annotations

import dataclasses
import functools
import logging

from lockstep_common.fleet_query import FleetQuery
from lockstep_common.open_files import fitting
from lockstep_common.query_gauges import QueryGauges
from lockstep_common.service import Resources, ServiceApp
from lockstep_common.subjects import Namespace
from lockstep_redfish.image_server import ImageServer
from lockstep_updater.adapters.agent_commands import NatsAgentCommands
from lockstep_updater.adapters.fleet_changes import FleetChanges, reconnects
from lockstep_updater.adapters.gauges import GAUGES
from lockstep_updater.adapters.images import BundleImages
from lockstep_updater.adapters.node_agent_nats import READ_TIMEOUT_S, NatsNodeAgent
from lockstep_updater.adapters.repository import PostgresStore
from lockstep_updater.adapters.wave_facts import WaveFacts
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.executor import Executor
from lockstep_updater.handlers import Handlers
from lockstep_updater.operator_commands import COMMANDS
from lockstep_updater.ports import NodeAgent
from lockstep_updater.router import subscriptions
from lockstep_updater.schedulers import scheduler_for
from lockstep_updater.settings import Settings
from lockstep_updater.worker import UpdaterWorker, executor_policy

NAME = "updater"
log = logging.getLogger(__name__)


def create_app(settings: Settings) -> ServiceApp:
    """Build the service; nothing connects until ``start()``."""
    # Without a node agent channel the runbook cannot run: drift is only reported, as before.
    gsp_remedy = settings.gsp_remedy if settings.agent_enabled else RemedyPolicy.OFF
    app = ServiceApp(
        NAME,
        settings,
        subscriptions=subscriptions(Handlers(gsp_remedy)),
        migration_package="lockstep_updater.migrations",
    )
    s, policy = settings, executor_policy(settings)
    # A kept session holds up to two keep-alive sockets: as many as the open-file limit allows.
    sessions = fitting(s.bmc_sessions_max, per_item=2)
    if sessions < s.bmc_sessions_max:
        log.warning(
            "bmc_sessions_max %d lowered to %d: the open-file hard limit allows no more",
            s.bmc_sessions_max,
            sessions,
        )
        policy = dataclasses.replace(policy, bmc_sessions_max=sessions)

    changes = FleetChanges(app.namespace)

    def executor(resources: Resources, server: ImageServer | None) -> Executor:
        # A wave's nodes read once, not a fleet.query per step (issue 28 item 3); a node the
        # inventory announces changed is read anew.
        fleet = FleetQuery(resources.nc, app.namespace, app.source, timeout_s=s.fleet_timeout_s)
        facts = WaveFacts(
            fleet,
            epoch=reconnects(resources),
            ttl_s=s.wave_facts_ttl_s,
            max_nodes=s.wave_facts_max_nodes,
        )
        changes.tell(facts)
        return Executor(
            PostgresStore(resources.pool, app.source),
            facts,
            scheduler_for(s),
            BundleImages(s.bundle_roots),
            policy,
            image_server=server,
            agent=node_agent(s, resources, app.namespace, app.source),
        )

    host = settings.image_server_host
    served = None if host is None else functools.partial(ImageServer, host, s.image_server_port)
    app.add_workers(
        changes,
        UpdaterWorker(settings, executor, served),
        QueryGauges(app.metrics.registry, GAUGES),
    )
    app.add_operator_commands(*COMMANDS)
    return app


def node_agent(
    settings: Settings, resources: Resources, namespace: Namespace, source: str
) -> NodeAgent | None:
    """The channel ``agent_channel`` names (None: none configured)."""
    if settings.agent_channel != "nats":
        return None
    commands = NatsAgentCommands(resources.nc, namespace, source)
    reads = NatsAgentCommands(resources.nc, namespace, source, timeout_s=READ_TIMEOUT_S)
    return NatsNodeAgent(commands, settings.agent_package, reads)
