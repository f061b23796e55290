"""Change classes as policy data: the schema and parser of ``data/change_classes.yaml``.

The four classes are seed 000's change-class table (emergency security, routine firmware
bundle, pre-approved standard change, power/fabric firmware); the numbers live in the data file,
not here. Parsed in pydantic's strict JSON mode: nothing is coerced, unknown keys are refused,
and :class:`PolicyError` names every offending field in one line.
"""

from __future__ import annotations

import enum
import itertools
import json
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.domain.fleet import ComponentKind

Seconds = Annotated[int, Field(ge=0, le=30 * 86_400)]
Fraction = Annotated[float, Field(gt=0, le=1)]


class PolicyError(ValueError):
    """The change-class policy is malformed; the message names the offending field."""


class UnfitNodes(enum.StrEnum):
    """What to do with a node in scope that has unexplained drift or an unreadable BMC."""

    EXCLUDE = "exclude"
    """Plan without it and say why (it stays at its old stack, visible as drift)."""
    REFUSE = "refuse"
    """Refuse the whole intent until the node is explained or fixed."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Approvals(_Strict):
    """Who must approve a plan of this class before it starts."""

    count: int = Field(ge=0, le=16, description="Signed approvals required (0: pre-approved).")
    distinct_approvers: bool = Field(
        description="True: the approvals must come from that many different approvers."
    )

    @model_validator(mode="after")
    def _distinct_needs_two(self) -> Approvals:
        if self.distinct_approvers and self.count < 2:
            raise ValueError("distinct_approvers needs a count of at least 2")
        return self


class StandardWindow(_Strict):
    """The declared window a pre-approved standard change must stay inside (seed 000: "driver
    minor within validated tuple window")."""

    kinds: tuple[ComponentKind, ...] = Field(
        min_length=1, description="Component kinds allowed to change."
    )
    components: tuple[str, ...] = Field(
        min_length=1, description="Component names allowed to change."
    )
    same_branch: tuple[str, ...] = Field(
        default=(),
        description="Components whose first version field (the driver branch) must not change.",
    )


class ClassPolicy(_Strict):
    """One change class."""

    canary_min_per_stratum: int = Field(ge=1, le=1000)
    wave_fractions: tuple[Fraction, ...] = Field(
        min_length=1, max_length=64, description="Cumulative fraction of scope after each wave."
    )
    canary_soak_s: Seconds
    layer_soak_s: Seconds = Field(description="Gate between layers inside a wave.")
    wave_soak_s: Seconds = Field(description="Gate after each wave's last layer.")
    failure_budget: float = Field(
        ge=0, le=1, description="Share of a wave's nodes that may fail before it halts."
    )
    approvals: Approvals
    one_way_allowed: bool
    tested_revert_required: bool = Field(
        description="A tested revert must be recorded before the first push (emergency)."
    )
    unfit_nodes: UnfitNodes
    max_fabric_domains_at_once: int | None = Field(
        default=None, ge=1, description="Fabric domains moving at once (power_fabric: 1)."
    )
    window: StandardWindow | None = Field(
        default=None, description="Only for standard: the window it is pre-approved inside."
    )

    @model_validator(mode="after")
    def _fractions(self) -> ClassPolicy:
        problems = fraction_problems(self.wave_fractions)
        if problems:
            raise ValueError("; ".join(problems))
        return self


class Policy(_Strict):
    """The whole file: exactly one entry per change class."""

    schema_version: int = Field(ge=1, le=1)
    classes: dict[ChangeClass, ClassPolicy]

    @model_validator(mode="after")
    def _complete(self) -> Policy:
        missing = sorted(set(ChangeClass) - set(self.classes))
        if missing:
            raise ValueError(f"missing change class(es): {', '.join(missing)}")
        for name, cls in self.classes.items():
            if (name is ChangeClass.STANDARD) != (cls.window is not None):
                raise ValueError(f"{name}: a window is required for standard and only for it")
        return self

    def __getitem__(self, change_class: ChangeClass) -> ClassPolicy:
        return self.classes[change_class]


def fraction_problems(fractions: tuple[float, ...]) -> list[str]:
    """What is wrong with cumulative wave fractions: they must rise strictly and end at 1.0, so
    every node lands in a wave."""
    problems = []
    if any(b <= a for a, b in itertools.pairwise(fractions)):
        problems.append(f"wave fractions must rise strictly: {list(fractions)}")
    if fractions and fractions[-1] != 1.0:
        problems.append(f"the last wave fraction must be 1.0, not {fractions[-1]}")
    return problems


def parse_policy(text: str | bytes) -> Policy:
    """Validate a YAML (or JSON) policy; raise :class:`PolicyError` naming every bad field."""
    try:
        document = yaml.safe_load(text)
        # Through JSON so pydantic's strict JSON mode applies: lists become tuples, nothing else
        # is coerced, and YAML's extra types (dates, binary) are refused.
        as_json = json.dumps(document)
    except yaml.YAMLError as exc:
        raise PolicyError(f"invalid change-class policy: not YAML: {_yaml_problem(exc)}") from None
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"invalid change-class policy: {exc}") from None
    try:
        return Policy.model_validate_json(as_json)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise PolicyError(f"invalid change-class policy: {problems}") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line: the problem and where."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem
