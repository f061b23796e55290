"""The compatibility table's schema and parser (standards.md section 7).

The table itself is data a service reads at start (``files.load_rules``: the packaged
``data/compatibility.json`` or the operator's file); this module only validates it.
Parsed in pydantic's strict JSON mode: ISO dates and enum values as JSON strings, nothing coerced
from other types, unknown keys refused; :class:`RulesError` names every offending field.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lockstep_common.vocabulary import Component, DriftKind

VersionText = Annotated[str, Field(pattern=r"^\d+(\.\d+)*$")]


class RulesError(ValueError):
    """The compatibility table is malformed; the message names the offending field."""


class BranchType(enum.StrEnum):
    """Data-center driver branch designations (standards.md section 7, Table 2)."""

    PRODUCTION = "production"
    NEW_FEATURE = "new-feature"
    LONG_TERM = "long-term"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class CudaFloor(_Strict):
    """Minor-version compatibility: any CUDA ``cuda_major``.x runs on driver >= ``min_driver``."""

    cuda_major: int = Field(ge=1)
    min_driver: VersionText
    note: str = ""


class ToolkitMinimum(_Strict):
    """Toolkit release (``major.minor.update``) -> minimum driver for its full feature set."""

    cuda: Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+$")]
    min_driver: VersionText


class Branch(_Strict):
    """One driver branch, matched by the driver's first version field."""

    prefix: Annotated[str, Field(pattern=r"^\d+$")]
    type: BranchType
    end_of_life: dt.date
    max_cuda_major: int = Field(ge=1)
    architectures: tuple[str, ...] = Field(min_length=1)


class EqualToDriver(_Strict):
    """Invariant: ``component``'s version equals the driver's."""

    rule: str = Field(min_length=1)
    component: Component
    kind: DriftKind
    note: str = ""


class CompatibilityRules(_Strict):
    """The whole table."""

    schema_version: Literal[1]
    sources: str = ""
    cuda_major_floor: tuple[CudaFloor, ...] = Field(min_length=1)
    cuda_toolkit_minimum: tuple[ToolkitMinimum, ...]
    branches: tuple[Branch, ...] = Field(min_length=1)
    profile_architecture: dict[str, str]
    equal_to_driver: tuple[EqualToDriver, ...]
    nccl_matches_cuda_major: bool

    @model_validator(mode="after")
    def _kinds(self) -> CompatibilityRules:
        allowed = {DriftKind.GSP_MISMATCH, DriftKind.INCOMPATIBLE}
        for invariant in self.equal_to_driver:
            if invariant.kind not in allowed:
                raise ValueError(f"equal_to_driver {invariant.rule}: kind must be one of {allowed}")
        return self

    @model_validator(mode="after")
    def _unique_keys(self) -> CompatibilityRules:
        for what, keys in (
            ("cuda_major_floor.cuda_major", [str(f.cuda_major) for f in self.cuda_major_floor]),
            ("cuda_toolkit_minimum.cuda", [t.cuda for t in self.cuda_toolkit_minimum]),
            ("branches.prefix", [b.prefix for b in self.branches]),
        ):
            dupes = sorted({k for k in keys if keys.count(k) > 1})
            if dupes:
                raise ValueError(f"duplicate {what}: {', '.join(dupes)}")
        return self

    def branch_of(self, driver: str) -> Branch | None:
        """The branch whose prefix is the driver's first version field."""
        head = driver.split(".", 1)[0]
        return next((b for b in self.branches if b.prefix == head), None)


def parse_rules(text: str | bytes) -> CompatibilityRules:
    """Validate a JSON table; raise :class:`RulesError` naming every bad field."""
    try:
        return CompatibilityRules.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise RulesError(f"invalid compatibility rules: {problems}") from exc
