"""The five services of the chaos world, built from settings tuned for a 10-node fleet at test
speed: short polls, leases and soaks, kills that cancel in-flight work at once. Each factory
builds a new process of its service (a stopped ``ServiceApp`` is not started again)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from lockstep_attest.app import create_app as attest_app
from lockstep_attest.settings import Settings as AttestSettings
from lockstep_common.service import ServiceApp
from lockstep_healthgate.app import create_app as healthgate_app
from lockstep_healthgate.settings import Settings as GateSettings
from lockstep_inventory.app import create_app as inventory_app
from lockstep_inventory.settings import Settings as InventorySettings
from lockstep_planner.app import create_app as planner_app
from lockstep_planner.settings import Settings as PlannerSettings
from lockstep_updater.app import create_app as updater_app
from lockstep_updater.settings import Settings as UpdaterSettings

SERVICES = ("attest", "inventory", "planner", "updater", "healthgate")
MAX_UNAVAILABLE = 2  # per pool: the fleet's 3 pools hold 2-5 nodes each, so the budget binds
SOAK_S = 1  # each wave soaks this long (whole seconds): ~10 health reports per node
CADENCE_S = 0.1
# The healthgate's minimums for a small fleet (as in test_rollout_e2e: 5 against 5 nodes is the
# smallest pair for which Mann-Whitney's exact 98% interval exists).
GATE_MINIMUM = """
[minimum]
canary_nodes = 5
control_nodes = 5
samples_per_node = 3
"""


def planner_policy(path: Path) -> Path:
    """Routine changes pre-approved, a canary of 5, one wave after it, short soaks."""
    doc = yaml.safe_load(
        resources.files("lockstep_planner").joinpath("data/change_classes.yaml").read_bytes()
    )
    routine = doc["classes"]["routine"]
    routine.update(
        canary_min_per_stratum=5,
        wave_fractions=[1.0],
        canary_soak_s=SOAK_S,
        layer_soak_s=0,
        wave_soak_s=SOAK_S,
    )
    routine["approvals"]["count"] = 0
    path.write_text(yaml.safe_dump(doc))
    return path


def gate_policy(path: Path) -> Path:
    text = resources.files("lockstep_gate").joinpath("data/default_policy.toml").read_text()
    head, _, rest = text.partition("[minimum]")
    path.write_text(head + GATE_MINIMUM + "\n[hard_rules]" + rest.split("\n[hard_rules]", 1)[1])
    return path


def _common(nats_url: str, database_url: str, namespace: str, service: str) -> dict[str, Any]:
    return {
        "nats_url": nats_url,
        "database_url": database_url,
        "namespace": namespace,
        "db_schema": f"{namespace}_{service}",
        "consumer_fetch_timeout_s": 0.2,
        "consumer_ack_wait_s": 2.0,
        "consumer_retry_backoff_s": (0.05, 0.1, 0.2, 0.5),
        "consumer_redelivery_backoff_s": (2.0, 2.0, 3.0, 3.0),
        "consumer_max_deliver": 20,
        "relay_poll_s": 0.05,
        # A kill, not a drain: in-flight work is cancelled almost at once, as by SIGKILL.
        "shutdown_grace_s": 0.05,
        "log_json": False,
        "log_level": "WARNING",
    }


def service_factories(
    nats_url: str,
    database_url: str,
    namespace: str,
    tmp: Path,
    *,
    trust: Path,
    scheduler_url: str,
) -> dict[str, Callable[[], ServiceApp]]:
    """Service name -> a function building a new process of it."""
    approvers = tmp / "approvers"
    approvers.mkdir(exist_ok=True)

    def common(service: str) -> dict[str, Any]:
        return _common(nats_url, database_url, namespace, service)

    return {
        "attest": lambda: attest_app(
            AttestSettings(
                **common("attest"), trust_store=trust, bundle_roots=[tmp], worker_poll_s=0.05
            )
        ),
        "inventory": lambda: inventory_app(
            InventorySettings(**common("inventory"), sweep_interval_s=0)
        ),
        "planner": lambda: planner_app(
            PlannerSettings(
                **common("planner"),
                policy_file=planner_policy(tmp / "classes.yaml"),
                approvers_dir=approvers,
                default_max_unavailable=MAX_UNAVAILABLE,
                worker_poll_s=0.05,
                lease_s=2.0,
            )
        ),
        "updater": lambda: updater_app(
            UpdaterSettings(
                **common("updater"),
                bundle_roots=[tmp],
                scheduler_url=scheduler_url,
                workers=8,
                worker_poll_s=0.05,
                lease_s=2.0,
                retry_s=0.2,
                drain_poll_s=0.05,
                drain_deadline_s=1.5,  # a 3 s job outlasts it: the node is given back, failed
                redfish_poll_s=0.02,
                verify_settle_s=0.5,
                fleet_timeout_s=1.0,
                reap_interval_s=0.3,  # a drain that lands after its item ended is swept soon
            )
        ),
        "healthgate": lambda: healthgate_app(
            GateSettings(
                **common("healthgate"),
                policy_file=gate_policy(tmp / "gate.toml"),
                eval_poll_s=0.05,
                eval_grace_s=0.2,
                eval_lease_s=2.0,
                heartbeat_watch_s=0.5,
            )
        ),
    }
