"""Composition root of the planner service: the only place its dependencies are built."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from lockstep_common.compatibility.files import load_rules
from lockstep_common.envelope import source_of
from lockstep_common.errors import ConfigurationError
from lockstep_common.events.v1 import FleetNode
from lockstep_common.fleet_query import FleetQuery
from lockstep_common.query_gauges import QueryGauges
from lockstep_common.service import Resources, ServiceApp
from lockstep_gate.policy import PolicyError as GatePolicyError
from lockstep_planner.adapters.approvers import ApproversError, TrustStore
from lockstep_planner.adapters.gauges import GAUGES
from lockstep_planner.adapters.policy_file import gate_minimum, packaged_policy, read_policy
from lockstep_planner.adapters.repository import PostgresStore
from lockstep_planner.adapters.scheduler_jobs import SchedulerJobs
from lockstep_planner.adapters.slurm_jobs import SlurmJobs
from lockstep_planner.domain.classes import Policy, PolicyError
from lockstep_planner.domain.judgeable import GateMinimum
from lockstep_planner.handlers import Handlers
from lockstep_planner.lifecycle import Timing
from lockstep_planner.operator_commands import all_commands
from lockstep_planner.planning import Planning
from lockstep_planner.router import subscriptions
from lockstep_planner.settings import Settings
from lockstep_planner.store import IntentRow, Occupancy
from lockstep_planner.worker import PlannerWorker
from lockstep_redfish.profile import profile_named

NAME = "planner"


def load_policy(settings: Settings) -> Policy:
    """The change-class policy from settings, else the packaged one; read and validated here,
    at start, so a bad file stops the service with one line naming the field."""
    if settings.policy_file is None:
        return packaged_policy()
    try:
        return read_policy(settings.policy_file)
    except OSError as exc:
        raise ConfigurationError(f"policy_file {settings.policy_file}: {exc.strerror}") from None
    except PolicyError as exc:
        raise ConfigurationError(f"policy_file {settings.policy_file}: {exc}") from None


def load_gate_minimum(settings: Settings) -> GateMinimum | None:
    """The gate policy's minimum sample, read at start (a bad file stops the service); None
    when the deployment turned the refusal off (``refuse_unjudgeable``)."""
    if not settings.refuse_unjudgeable:
        return None
    try:
        return gate_minimum(settings.gate_policy_file)
    except GatePolicyError as exc:
        raise ConfigurationError(f"gate_policy_file: {exc}") from None


def load_approvers_of(settings: Settings) -> Mapping[str, Ed25519PublicKey]:
    """The approvers trust store, read at start (a bad key file refuses to start) and again
    whenever its directory changes (``adapters.approvers.TrustStore``)."""
    if settings.approvers_dir is None:
        return {}
    try:
        return TrustStore(settings.approvers_dir)
    except ApproversError as exc:
        raise ConfigurationError(f"approvers_dir: {exc}") from None


def occupancy_of(settings: Settings) -> Occupancy | None:
    """Where running jobs are read (a fabric domain is OCCUPIED while one runs on it); None:
    not tracked."""
    if settings.scheduler == "slurm":
        return SlurmJobs(
            squeue=settings.slurm_squeue,
            scontrol=settings.slurm_scontrol,
            conf=settings.slurm_conf,
            timeout_s=settings.slurm_timeout_s,
        )
    return SchedulerJobs(settings.scheduler_url) if settings.scheduler_url else None


def create_app(settings: Settings) -> ServiceApp:
    """Build the service; nothing connects until ``start()`` (the policy is read here)."""
    timing = Timing(
        settings.wave_deadline_factor, settings.wave_deadline_min_s, settings.wave_redrive_s
    )
    planning = Planning(
        load_policy(settings),
        settings.default_max_unavailable,
        timing,
        load_approvers_of(settings),
        rules=load_rules(settings.rules_file),
        gate_minimum=load_gate_minimum(settings),
        bmc_profiles={hw: profile_named(p) for hw, p in settings.bmc_profiles.items()},
    )
    source = source_of(NAME)
    app = ServiceApp(
        NAME,
        settings,
        subscriptions=subscriptions(Handlers(timing)),
        migration_package="lockstep_planner.migrations",
    )

    def fleet(resources: Resources) -> FleetQuery:
        return FleetQuery(resources.nc, app.namespace, source, timeout_s=settings.fleet_timeout_s)

    worker = PlannerWorker(
        planning,
        store=lambda resources: PostgresStore(resources.pool, source),
        fleet=fleet,
        poll_s=settings.worker_poll_s,
        lease_s=settings.lease_s,
        max_attempts=settings.max_attempts,
        occupancy=lambda _: occupancy_of(settings),
        fabric_sync_s=settings.fabric_sync_s,
        wake_channel=f"{app.schema}_planner",
    )
    app.add_workers(worker, QueryGauges(app.metrics.registry, GAUGES))

    async def carry_out() -> bool:  # an operator's command, at once (rollout.control)
        return await worker.commands(PostgresStore(app.require().pool, source))

    desk = PlanningDesk(app, worker, fleet, source, settings.lease_s)
    app.add_operator_commands(*all_commands(carry_out, desk))
    return app


class PlanningDesk:
    """Planning on request (``rollout plan|start``) with the worker's own code."""

    def __init__(
        self,
        app: ServiceApp,
        worker: PlannerWorker,
        fleet: Callable[[Resources], FleetQuery],
        source: str,
        lease_s: float,
    ) -> None:
        self.planning = worker.planning
        self.lease_s = lease_s
        self._app, self._worker, self._fleet, self._source = app, worker, fleet, source

    async def fleet(self) -> Sequence[FleetNode]:
        return await self._fleet(self._app.require()).nodes(None)

    async def plan_now(self, row: IntentRow) -> str:
        resources = self._app.require()
        store = PostgresStore(resources.pool, self._source)
        return await self._worker.plan_claimed(store, self._fleet(resources), row)
