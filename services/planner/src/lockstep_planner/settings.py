"""Settings of the planner service: ``LOCKSTEP_PLANNER_*`` plus the shared ``LOCKSTEP_*``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from lockstep_common.settings import Seconds, ServiceSettings
from lockstep_redfish.profile import named_profiles


class Settings(ServiceSettings):
    """Everything the planner service can be configured with (see ``ServiceSettings``)."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_PLANNER_", extra="forbid", populate_by_name=True, validate_default=True
    )

    policy_file: Path | None = Field(
        default=None,
        description="Change-class policy YAML replacing the packaged one (validated at start).",
    )
    rules_file: Path | None = Field(
        default=None,
        description="Compatibility rules JSON replacing the packaged table; use the inventory's "
        "file, so a target the planner lets start is one the inventory judges compatible.",
    )
    gate_policy_file: Path | None = Field(
        default=None,
        description="The healthgate's gate policy (its LOCKSTEP_HEALTHGATE_POLICY_FILE; the "
        "packaged one when unset). A plan with a stratum too small for its [minimum] canary "
        "and control is refused: its gate could only ever be inconclusive.",
    )
    refuse_unjudgeable: bool = Field(
        default=True,
        description="Refuse a plan with a stratum too small for the gate policy's [minimum]. "
        "Off only where inconclusive gates are accepted on purpose: the planning benchmark's "
        "generated fleets, a lab of a handful of nodes (each wave then waits for a resume).",
    )
    approvers_dir: Path | None = Field(
        default=None,
        description="Approvers trust store: <approver>.pem Ed25519 public keys, read again at each "
        "approval (a key added or removed counts without a restart). Without one, no "
        "approval verifies and classes that need approvals never start (fails closed).",
    )
    bmc_profiles: dict[str, str] = Field(
        default_factory=dict,
        description="Hardware profile -> the BMC profile its nodes' BMCs speak (an id from "
        'lockstep_redfish/profiles, e.g. {"gb200": "nvidia-gb200-nvl"}, as JSON). Its answer '
        "orders the plan's layers: firmware a bundle calls A/B is one-way where that BMC keeps no "
        'previous image to run again (docs/updater.md "Flip-back"). A hardware profile not '
        "named here keeps its bundle's banks declaration; an unknown id refuses to start.",
    )
    default_max_unavailable: int = Field(
        default=8,
        ge=1,
        le=100_000,
        description="Nodes per pool out of service at once, unless a strategy lowers it. A "
        "switch bundle takes a whole fabric domain out at once (an NVL72 domain: 18 nodes), so "
        "it needs at least that; below it the intent is refused naming this setting.",
    )
    worker_poll_s: float = Field(default=1.0, gt=0, description="Worker poll when idle, seconds.")
    lease_s: float = Field(default=120.0, gt=0, description="A claimed intent's lease, seconds.")
    max_attempts: int = Field(default=5, ge=1, description="Claims before an intent is refused.")
    fleet_timeout_s: Seconds = Field(default=10.0, description="Bound of one fleet.query page.")
    wave_deadline_factor: float = Field(
        default=3.0, ge=1, description="A wave's deadline: this many times its estimated work..."
    )
    scheduler: Literal["sim", "slurm"] = Field(
        default="sim",
        description="Where the running jobs that occupy fabric domains are read: the "
        "simulator's scheduler API (scheduler_url) or a Slurm cluster (squeue and scontrol).",
    )
    scheduler_url: str = Field(
        default="",
        description="Base URL of the scheduler API for scheduler=sim (/scheduler/jobs). Empty: "
        "occupancy is not tracked, and a domain is never OCCUPIED (the updater still waits for "
        "each node's drain).",
    )
    slurm_squeue: str = Field(default="squeue", description="squeue for scheduler=slurm.")
    slurm_scontrol: str = Field(default="scontrol", description="scontrol for scheduler=slurm.")
    slurm_conf: str | None = Field(default=None, description="SLURM_CONF for scheduler=slurm.")
    slurm_timeout_s: float = Field(
        default=30.0, gt=0, description="Bound of one squeue or scontrol call, seconds."
    )
    fabric_sync_s: float = Field(
        default=30.0,
        gt=0,
        description="How often fabric domains are refreshed from the fleet and the scheduler, s.",
    )
    wave_deadline_min_s: float = Field(
        default=3600.0, gt=0, description="...but never less than this many seconds."
    )
    wave_redrive_s: float = Field(
        default=300.0,
        gt=0,
        description="A released wave none of whose nodes moved for this many seconds has its "
        "wave.planned published again (same event id: a broker that lost it; test plan A4).",
    )

    @field_validator("bmc_profiles")
    @classmethod
    def _known_profiles(cls, value: dict[str, str]) -> dict[str, str]:
        return named_profiles(value)
