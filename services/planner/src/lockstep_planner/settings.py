"""Settings of the planner service: ``LOCKSTEP_PLANNER_*`` plus the shared ``LOCKSTEP_*``."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from lockstep_common.settings import ServiceSettings


class Settings(ServiceSettings):
    """Everything the planner service can be configured with (see ``ServiceSettings``)."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_PLANNER_", extra="forbid", populate_by_name=True, validate_default=True
    )
