"""Settings of the healthgate service: ``LOCKSTEP_HEALTHGATE_*`` plus the shared ``LOCKSTEP_*``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from lockstep_common.settings import Seconds, ServiceSettings

DAY_S = 86_400.0


class Settings(ServiceSettings):
    """Everything the healthgate service can be configured with (see ``ServiceSettings``)."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_HEALTHGATE_",
        extra="forbid",
        populate_by_name=True,
        validate_default=True,
    )

    policy_file: Path | None = Field(
        default=None, description="Gate policy (TOML, or JSON) replacing the packaged default."
    )
    sample_retention_s: float = Field(
        default=3 * DAY_S,
        ge=DAY_S,
        description="Health samples older than this are dropped, a whole day partition at a time.",
    )
    partitions_ahead_days: int = Field(
        default=2, ge=1, le=31, description="Day partitions of samples created ahead of time."
    )
    baseline_s: Seconds = Field(
        default=1800.0,
        description="Samples before a wave was planned that the environmental check compares "
        "each group with.",
    )
    hard_rule_lookback_s: Seconds = Field(
        default=60.0,
        description="Samples the hard rules read at ingest: enough for consecutive busbw runs "
        "(the policy's busbw_consecutive at 10 s), and small, because a fleet-wide busbw drop "
        "makes every batch read it.",
    )
    eval_poll_s: Seconds = Field(default=2.0, description="Evaluation worker's idle poll.")
    heartbeat_watch_s: Seconds = Field(
        default=10.0, description="How often soaking waves are checked for silent nodes."
    )
    eval_grace_s: float = Field(
        default=15.0,
        ge=0,
        description="Wait after a soak ends before judging it, so samples in flight are in.",
    )
    eval_lease_s: Seconds = Field(default=120.0, description="Lease of one evaluation claim.")
    eval_max_attempts: int = Field(
        default=3, ge=1, le=100, description="Claims of one wave before it is held inconclusive."
    )
    straggler_interval_s: float = Field(
        default=300.0,
        ge=0,
        description="Between straggler evaluations of the whole fleet, seconds (0: never).",
    )
    straggler_window_s: Seconds = Field(
        default=1800.0, description="Each node's medians are taken over this many seconds."
    )
    fleet_timeout_s: Seconds = Field(default=10.0, description="Bound of one fleet.query page.")
