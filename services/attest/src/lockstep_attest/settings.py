"""Settings of the attest service: ``LOCKSTEP_ATTEST_*`` plus the shared ``LOCKSTEP_*``."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from lockstep_common.settings import ServiceSettings


class Settings(ServiceSettings):
    """Everything the attest service can be configured with (see ``ServiceSettings``)."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_ATTEST_", extra="forbid", populate_by_name=True, validate_default=True
    )
