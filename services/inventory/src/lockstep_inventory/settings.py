"""Settings of the inventory service: ``LOCKSTEP_INVENTORY_*`` plus the shared ``LOCKSTEP_*``."""

from __future__ import annotations

import enum
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from lockstep_common.settings import Seconds, ServiceSettings
from lockstep_redfish.profile import named_for, named_profiles


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
    bmc_profiles: dict[str, str] = Field(
        default_factory=dict,
        description="BMC profiles named instead of the one a sweep chooses from what the BMC "
        "says (a JSON object, as the updater's bmc_profiles): a node id or a hardware profile "
        "(SKU) -> a shipped profile id (`lockstep bmc probe` lists them); a node's id wins over "
        "its SKU. Its member rows say which member holds which component. An unknown profile "
        "id is refused at start.",
    )

    @field_validator("bmc_profiles")
    @classmethod
    def _known_profiles(cls, value: dict[str, str]) -> dict[str, str]:
        return named_profiles(value)

    def profile_named_for(self, node_id: str, sku: str) -> str | None:
        """The BMC profile id named for the node (its id first, then its SKU); None: choose."""
        return named_for(self.bmc_profiles, node_id, sku)

    @model_validator(mode="after")
    def _sweeps_fresher_than_admission(self) -> Settings:
        if 0 < self.admission_max_age_s <= self.sweep_interval_s:
            raise ValueError(
                f"admission_max_age_s ({self.admission_max_age_s:g}) must exceed "
                f"sweep_interval_s ({self.sweep_interval_s:g}), or every node goes stale "
                "between sweeps"
            )
        return self
