"""Settings of the inventory service: ``LOCKSTEP_INVENTORY_*`` plus the shared ``LOCKSTEP_*``."""

from __future__ import annotations

import enum
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from lockstep_common.settings import Seconds, ServiceSettings


class Expand(enum.StrEnum):
    """When the sweeper uses ``$expand`` on FirmwareInventory (DSP0266 "Query parameters")."""

    AUTO = "auto"  # when ServiceRoot advertises ExpandQuery.Levels
    ALWAYS = "always"
    NEVER = "never"


class Settings(ServiceSettings):
    """Everything the inventory service can be configured with (see ``ServiceSettings``)."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_INVENTORY_",
        extra="forbid",
        populate_by_name=True,
        validate_default=True,
    )

    sweep_interval_s: float = Field(
        default=300.0, ge=0, description="Seconds between Redfish sweeps (0: no periodic sweep)."
    )
    sweep_concurrency: int = Field(default=512, ge=1, le=8192, description="BMCs read at once.")
    sweep_per_bmc: int = Field(default=2, ge=1, le=16, description="Requests per BMC at once.")
    sweep_timeout_s: Seconds = Field(default=10.0, description="Bound of one HTTP attempt.")
    sweep_retries: int = Field(default=2, ge=0, le=10, description="Retries per request.")
    sweep_verify_tls: bool = Field(default=True, description="Verify BMC TLS certificates.")
    sweep_expand: Expand = Field(default=Expand.AUTO, description="auto, always or never.")
    sweep_chunk: int = Field(
        default=256, ge=1, le=8192, description="Sweep results committed per transaction (min)."
    )
    admission_max_age_s: Seconds = Field(
        default=900.0, description="A report older than this refuses admission (stale)."
    )
    rules_file: Path | None = Field(
        default=None, description="Compatibility rules JSON replacing the packaged table."
    )
    metrics_interval_s: Seconds = Field(default=15.0, description="Fleet gauges refresh period.")

    @model_validator(mode="after")
    def _sweeps_fresher_than_admission(self) -> Settings:
        if 0 < self.admission_max_age_s <= self.sweep_interval_s:
            raise ValueError(
                f"admission_max_age_s ({self.admission_max_age_s:g}) must exceed "
                f"sweep_interval_s ({self.sweep_interval_s:g}), or every node goes stale "
                "between sweeps"
            )
        return self
