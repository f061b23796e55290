"""Composition root of the updater service: the only place its dependencies are built."""

from __future__ import annotations

from lockstep_common.query_gauges import QueryGauges
from lockstep_common.service import ServiceApp
from lockstep_updater.adapters.gauges import GAUGES
from lockstep_updater.domain.remedy import RemedyPolicy
from lockstep_updater.handlers import Handlers
from lockstep_updater.operator_commands import COMMANDS
from lockstep_updater.router import subscriptions
from lockstep_updater.settings import Settings
from lockstep_updater.worker import UpdaterWorker

NAME = "updater"


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
    app.add_workers(
        UpdaterWorker(settings, app.namespace, NAME), QueryGauges(app.metrics.registry, GAUGES)
    )
    app.add_operator_commands(*COMMANDS)
    return app
