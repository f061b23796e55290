"""Settings of the updater service: ``LOCKSTEP_UPDATER_*`` plus the shared ``LOCKSTEP_*``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from lockstep_common.settings import ServiceSettings
from lockstep_redfish.profile import named_profiles
from lockstep_updater.domain.remedy import RemedyPolicy


class Settings(ServiceSettings):
    """Everything the updater service can be configured with (see ``ServiceSettings``)."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_UPDATER_", extra="forbid", populate_by_name=True, validate_default=True
    )

    bundle_roots: list[Path] = Field(
        default_factory=list,
        description="Directories attested bundles may be read from (a JSON list). An image "
        "anywhere else is refused: the node fails before anything is sent.",
    )
    scheduler: Literal["sim", "slurm", "kubernetes"] = Field(
        default="sim",
        description="Which scheduler the updater drains nodes with: the simulator's scheduler "
        "API (scheduler_url), a Slurm cluster through scontrol (slurm_*), or a Kubernetes API "
        "server (kubeconfig; the Eviction API).",
    )
    scheduler_url: str = Field(
        default="http://127.0.0.1:8001",
        description="Base URL of the scheduler API (the simulator's /scheduler/...).",
    )
    kubeconfig: Path | None = Field(
        default=None,
        description="kubeconfig file for scheduler=kubernetes; unset: the pod's service account.",
    )
    kube_evict_backoff_s: float = Field(
        default=1.0, gt=0, description="First pause after an eviction a PDB refused (429)."
    )
    kube_evict_backoff_max_s: float = Field(
        default=60.0, gt=0, description="Longest pause between evictions a PDB refuses."
    )
    slurm_scontrol: str = Field(
        default="scontrol", description="The scontrol program (a path, or a name on PATH)."
    )
    slurm_conf: str | None = Field(
        default=None, description="SLURM_CONF for scontrol; unset: Slurm's own default."
    )
    slurm_timeout_s: float = Field(
        default=30.0, gt=0, description="How long one scontrol call may take, seconds."
    )
    worker_poll_s: float = Field(default=1.0, gt=0, description="Work poll when idle, seconds.")
    workers: int = Field(
        default=4,
        ge=1,
        le=4096,
        description="Nodes worked on at once (a worker waiting on a BMC's task costs a poll "
        "every few seconds: cover the nodes a wave stages at once, over the replicas).",
    )
    lease_s: float = Field(
        default=900.0, gt=0, description="A claimed item's lease, seconds (> a task deadline)."
    )
    retry_s: float = Field(default=5.0, gt=0, description="Pause before a step is retried.")
    drain_poll_s: float = Field(default=5.0, gt=0, description="Between drain checks, seconds.")
    drain_deadline_s: float = Field(
        default=3600.0, gt=0, description="A node not drained by then is restored and skipped."
    )
    orphan_ttl_s: float = Field(
        default=1800.0,
        gt=0,
        description="A node left cordoned by a worker that died (no live lease for this long) "
        "is given back and its item failed (> lease_s).",
    )
    reap_interval_s: float = Field(
        default=60.0,
        gt=0,
        description="Between searches for such orphaned drains, and for drains of Lockstep's "
        "that landed after their work item ended (given back), seconds.",
    )
    wave_redrive_s: float = Field(
        default=300.0,
        gt=0,
        description="A completed wave whose next wave the planner has not released after this "
        "many seconds has its wave.completed published again (same event id; a broker that "
        "lost it, test plan A4), then after twice as long, and so on.",
    )
    wave_redrives_max: int = Field(
        default=5, ge=0, le=20, description="Re-drives of one wave.completed at most."
    )
    fleet_timeout_s: float = Field(
        default=5.0, gt=0, description="How long a fleet.query may take, seconds."
    )
    bmc_sessions_max: int = Field(
        default=2048,
        ge=1,
        le=65536,
        description="BMC sessions kept open between a node's steps (one login per node for its "
        "whole update); past it the longest unused is logged out, and its node logs in again.",
    )
    wave_facts_ttl_s: float = Field(
        default=60.0,
        gt=0,
        description="As old as a wave's copy of a node's facts may get before it is read anew, s.",
    )
    wave_facts_max_nodes: int = Field(
        default=20_000,
        ge=1,
        description="Nodes whose facts are kept (about 1 kB each); the oldest copies go first.",
    )
    redfish_poll_s: float = Field(
        default=5.0, gt=0, description="Between task polls and read-backs on a BMC, seconds."
    )
    task_hold_s: float = Field(
        default=60.0,
        gt=0,
        description="How long a worker follows a BMC's task (staging, activation) before it "
        "gives the node back to the queue and serves others; re-claimed after retry_s.",
    )
    verify_settle_s: float = Field(
        default=120.0, gt=0, description="How long the inventory of a BMC may lag its task."
    )
    push_gap_s: float | None = Field(
        default=None,
        ge=0,
        description="Between two pushes to one BMC, seconds, instead of its BMC profile's "
        "min_gap_s (a lab whose BMCs take pushes back to back, or a test); unset: the profile's.",
    )
    bmc_profiles: dict[str, str] = Field(
        default_factory=dict,
        description="BMC profiles named instead of the one preflight chooses from what the BMC "
        "says (a JSON object): a node id or a hardware profile (SKU) -> a shipped profile id "
        "(`lockstep bmc probe` lists them); a node's id wins over its SKU. An unknown profile "
        "id is refused at start.",
    )
    image_server_host: str | None = Field(
        default=None,
        description="Address BMCs without a multipart push URI pull images from (SimpleUpdate); "
        "unset: their nodes fail at the push, nothing is offered.",
    )
    image_server_port: int = Field(default=0, ge=0, le=65535, description="Its port (0: free).")
    agent_channel: Literal["none", "nats"] = Field(
        default="none",
        description="How in-band commands reach node agents: nats (each node's lockstep-agent on "
        "agent.command.<site>.<node>, as this updater's NATS identity, the only one allowed to "
        "publish there), or none: in-band work (driver, CUDA, NCCL, fabric manager, the GSP "
        "runbook) fails with that reason.",
    )
    agent_package: str = Field(
        default="nvidia-driver",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9.+_:~-]{0,127}$",
        description="The driver package's name in the nodes' repositories (the agent downloads "
        "<package>=<version> and checks it against the attested digest).",
    )
    gsp_remedy: RemedyPolicy = Field(
        default=RemedyPolicy.AUTOMATIC,
        description="The GSP / driver mismatch runbook on drift.detected: automatic (a node "
        "whose GPUs already failed to initialise is repaired one at a time per pool), approval "
        "(held until `lockstep node approve-remedy NODE`), or off. Off whenever agent_channel "
        "is none: the runbook needs the agent channel.",
    )
    remedy_max_unavailable: int = Field(
        default=1,
        ge=1,
        description="A GSP remedy takes its node out of service only while fewer of the pool's "
        "nodes than this are out (every rollout's included).",
    )

    @field_validator("bmc_profiles")
    @classmethod
    def _known_profiles(cls, value: dict[str, str]) -> dict[str, str]:
        return named_profiles(value)

    @property
    def agent_enabled(self) -> bool:
        """Whether any node agent channel is configured."""
        return self.agent_channel == "nats"
