"""Composition root of the healthgate service: the only place its dependencies are built."""

from __future__ import annotations

from lockstep_common.errors import ConfigurationError
from lockstep_common.fleet_query import FleetQuery
from lockstep_common.query_gauges import QueryGauges
from lockstep_common.service import Resources, ServiceApp
from lockstep_gate.policy import Policy, PolicyError
from lockstep_gate.policy_files import default_policy, load_policy
from lockstep_healthgate.adapters.gauges import GAUGES
from lockstep_healthgate.adapters.pg_store import PgGateStore
from lockstep_healthgate.handlers import Handlers
from lockstep_healthgate.maintenance import PartitionKeeper
from lockstep_healthgate.operator_commands import COMMANDS
from lockstep_healthgate.router import subscriptions
from lockstep_healthgate.settings import Settings
from lockstep_healthgate.store import GateStore
from lockstep_healthgate.straggler_watch import StragglerConfig, StragglerWatch
from lockstep_healthgate.verdicts import GateConfig
from lockstep_healthgate.worker import GateWorker

NAME = "healthgate"


def load_gate_policy(settings: Settings) -> Policy:
    """The policy file from settings, else the packaged one; read at start, so a bad file
    refuses to start instead of failing every evaluation."""
    if settings.policy_file is None:
        return default_policy()
    try:
        return load_policy(settings.policy_file)
    except PolicyError as exc:
        raise ConfigurationError(str(exc)) from None


def create_app(settings: Settings) -> ServiceApp:
    """Build the service; nothing connects until ``start()`` (the policy is read here)."""
    config = GateConfig(
        policy=load_gate_policy(settings),
        retention_s=settings.sample_retention_s,
        lookback_s=settings.hard_rule_lookback_s,
        baseline_s=settings.baseline_s,
    )
    app = ServiceApp(
        NAME,
        settings,
        subscriptions=subscriptions(Handlers(config)),
        migration_package="lockstep_healthgate.migrations",
    )

    def store(resources: Resources) -> GateStore:
        return PgGateStore(resources.pool, app.source)

    def fleet(resources: Resources) -> FleetQuery:
        timeout_s = settings.fleet_timeout_s
        return FleetQuery(resources.nc, app.namespace, app.source, timeout_s=timeout_s)

    app.add_workers(
        PartitionKeeper(
            interval_s=settings.maintenance_interval_s,
            ahead_days=settings.partitions_ahead_days,
            retention_s=settings.sample_retention_s,
        ),
        GateWorker(
            config,
            store=store,
            poll_s=settings.eval_poll_s,
            grace_s=settings.eval_grace_s,
            lease_s=settings.eval_lease_s,
            max_attempts=settings.eval_max_attempts,
            watch_s=settings.heartbeat_watch_s,
        ),
        StragglerWatch(
            StragglerConfig(
                interval_s=settings.straggler_interval_s,
                window_s=settings.straggler_window_s,
                fleet_timeout_s=settings.fleet_timeout_s,
            ),
            store=store,
            fleet=fleet,
        ),
        QueryGauges(app.metrics.registry, GAUGES),
    )
    app.add_operator_commands(*COMMANDS)
    return app
