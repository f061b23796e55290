"""Settings of the updater service: ``LOCKSTEP_UPDATER_*`` plus the shared ``LOCKSTEP_*``."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from lockstep_common.settings import ServiceSettings


class Settings(ServiceSettings):
    """Everything the updater service can be configured with (see ``ServiceSettings``)."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_UPDATER_", extra="forbid", populate_by_name=True, validate_default=True
    )
