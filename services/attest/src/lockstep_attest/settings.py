"""Settings of the attest service: ``LOCKSTEP_ATTEST_*`` plus the shared ``LOCKSTEP_*``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from lockstep_common.settings import ServiceSettings


class Settings(ServiceSettings):
    """Everything the attest service can be configured with (see ``ServiceSettings``)."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_ATTEST_",
        extra="forbid",
        populate_by_name=True,
        validate_default=True,
    )

    trust_store: Path | None = Field(
        default=None,
        description="Trust store directory (docs/bundles.md). Without one, every bundle is "
        "rejected: attestation fails closed.",
    )
    policy_file: Path | None = Field(default=None, description="Policy JSON (defaults otherwise).")
    bundle_roots: list[Path] = Field(
        default_factory=list,
        description="Directories bundles may be read from (a JSON list). A submission naming "
        "anything else, or none configured, is rejected: attest fails closed.",
    )
    max_bundle_bytes: int = Field(
        default=64 << 30, ge=1, description="Largest bundle read, extracted size for a tar."
    )
    worker_poll_s: float = Field(default=1.0, gt=0, description="Job poll when idle, seconds.")
    lease_s: float = Field(default=600.0, gt=0, description="A claimed job's lease, seconds.")
    max_attempts: int = Field(default=3, ge=1, description="Claims before a job is rejected.")
    verdict_reuse_s: float = Field(
        default=3600.0, ge=0, description="Reuse a verdict for a byte-identical bundle this long."
    )
