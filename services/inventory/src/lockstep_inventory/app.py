"""Composition root of the inventory service: the only place its dependencies are built."""

from __future__ import annotations

from lockstep_common.compatibility.files import load_rules
from lockstep_common.service import ServiceApp
from lockstep_inventory.adapters.announce import on_bus
from lockstep_inventory.admission import admission_responder
from lockstep_inventory.fleet_metrics import FleetGauges, GaugeRefresher
from lockstep_inventory.fleet_query import fleet_query_responder
from lockstep_inventory.handlers import Handlers
from lockstep_inventory.importing import import_command
from lockstep_inventory.operator_commands import commands, golden_command, sweep_commands
from lockstep_inventory.router import subscriptions
from lockstep_inventory.settings import Settings
from lockstep_inventory.sweep_worker import SweepWorker
from lockstep_inventory.sweeping import redfish_reader

NAME = "inventory"


def create_app(settings: Settings) -> ServiceApp:
    """Build the service; nothing connects until ``start()`` (the rules file is read here)."""
    rules = load_rules(settings.rules_file)
    app = ServiceApp(
        NAME,
        settings,
        subscriptions=subscriptions(Handlers(rules)),
        migration_package="lockstep_inventory.migrations",
    )
    gauges = GaugeRefresher(FleetGauges(app.metrics.registry), settings.metrics_interval_s)
    sweeper = SweepWorker(settings, app.source, rules, gauges, read=redfish_reader(settings))
    app.add_workers(
        sweeper,
        admission_responder(app.namespace, app.source, settings.admission_max_age_s),
        fleet_query_responder(app.namespace, app.source),
        gauges,
    )
    # Registry changes announced to every updater process (its wave snapshots).
    announce = on_bus(lambda: app.require().nc, app.namespace, app.source)
    app.add_operator_commands(
        *commands(announce),
        golden_command(rules),
        import_command(rules, announce=announce),
        *sweep_commands(sweeper),
    )
    return app
