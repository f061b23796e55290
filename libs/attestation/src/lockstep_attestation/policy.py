"""The verification policy: what an operator decides, per deployment (a JSON file)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from lockstep_common.vocabulary import Component


class Policy(BaseModel):
    """Which evidence is required and how strict each check is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cvss_ceiling: Annotated[float, Field(ge=0, le=10)] = Field(
        default=7.0, description="An open S.A.F.E. issue scoring at or above this blocks."
    )
    require_safe: tuple[Component, ...] = Field(
        default=(), description="Components that must carry at least one S.A.F.E. report."
    )
    require_rim: tuple[Component, ...] = Field(
        default=(), description="Components that must carry a RIM."
    )
    rim_verification_time: Literal["now", "bundle_created_at"] | AwareDatetime = Field(
        default="now",
        description="When RIM certificate chains must be valid: now, the bundle's creation "
        "time, or a stated instant (NVIDIA's RIM leaves expire; pick this consciously).",
    )
    rollback_approvals: tuple[str, ...] = Field(
        default=(),
        description="Signed rollback approvals (compact JWS files) that allow a bundle older "
        "than the pinned one.",
    )

    def rim_time(self, *, now: datetime, bundle_created_at: datetime) -> datetime:
        """The instant RIM chains are validated at."""
        if self.rim_verification_time == "now":
            return now
        if self.rim_verification_time == "bundle_created_at":
            return bundle_created_at
        return self.rim_verification_time
