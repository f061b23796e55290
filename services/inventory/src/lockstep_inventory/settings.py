"""Settings of the inventory service: ``LOCKSTEP_INVENTORY_*`` plus the shared ``LOCKSTEP_*``."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from lockstep_common.settings import ServiceSettings


class Settings(ServiceSettings):
    """Everything the inventory service can be configured with (see ``ServiceSettings``)."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_INVENTORY_",
        extra="forbid",
        populate_by_name=True,
        validate_default=True,
    )
