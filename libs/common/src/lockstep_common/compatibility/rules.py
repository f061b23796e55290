"""Compatibility rules of a node's software tuple (design.md "inventory"; standards.md section 7).

The table is data, validated by strict pydantic models (``table.py``): CUDA major -> driver
floor (minor-version compatibility), CUDA toolkit release -> minimum driver, data-center driver
branches (type, end of life, max CUDA major, GPU architectures), GPU architecture per hardware
profile, and the "equal to the driver" invariants (GSP firmware, seed 004; Fabric Manager). The
services read it once at start (``files.load_rules``: the packaged ``data/compatibility.json``,
or the operator's file) and pass it in: the inventory judges drift by it, the planner a
rollout's target stack.
:func:`check_compatibility` is pure: same inputs, same :class:`DriftItem` list, each naming the
rule it broke. The table is parsed in pydantic's strict JSON mode (ISO dates and enum values as
JSON strings, nothing coerced from other types).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from functools import cache

from lockstep_common.compatibility.items import drift_item
from lockstep_common.compatibility.table import (
    Branch,
    BranchType,
    CompatibilityRules,
    RulesError,
    parse_rules,
)
from lockstep_common.events.v1 import DriftItem
from lockstep_common.versions import DOT_INTEGER, compare_versions, is_dot_integer
from lockstep_common.vocabulary import Component, DriftKind, Severity

__all__ = [
    "Branch",
    "BranchType",
    "CompatibilityRules",
    "RulesError",
    "check_compatibility",
    "driver_below",
    "parse_rules",
]

_NCCL_CUDA = re.compile(r"\+cuda(\d+)(\.\d+)*$")


def driver_below(driver: str, floor: str) -> bool:
    """Whether a driver version is below a rule's floor, both ``DotIntegerNotation`` (the caller
    has refused a non-numeric driver; the packaged floors are numeric), in the one version
    ordering (``lockstep_common.versions``)."""
    return compare_versions(driver, floor, DOT_INTEGER) == -1


@cache  # called for every toolkit row on every judgement; versions are few
def _cuda_key(cuda: str) -> tuple[int, int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", cuda)
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)


def _broken(
    component: Component,
    expected: str | None,
    actual: str | None,
    rule: str,
    detail: str,
    *,
    kind: DriftKind = DriftKind.INCOMPATIBLE,
    severity: Severity | None = None,
) -> DriftItem:
    """An item naming the ``rule`` it broke."""
    return drift_item(component, expected, actual, kind, f"rule {rule}: {detail}", severity)


def _cuda_items(rules: CompatibilityRules, cuda: str, driver: str) -> list[DriftItem]:
    key = _cuda_key(cuda)
    if key is None:
        return [_broken(Component.CUDA, None, cuda, "cuda_version", "unparseable CUDA version")]
    floor = next((f for f in rules.cuda_major_floor if f.cuda_major == key[0]), None)
    if floor is None:
        return [
            _broken(Component.CUDA, None, cuda, "cuda_major_floor", f"no row for CUDA {key[0]}")
        ]
    if driver_below(driver, floor.min_driver):
        return [
            _broken(
                Component.DRIVER,
                f">={floor.min_driver}",
                driver,
                "cuda_major_floor",
                f"CUDA {cuda} needs driver >= {floor.min_driver} (CUDA {key[0]}.x minor-version "
                "compatibility, standards.md section 7)",
            )
        ]
    rows = [t for t in rules.cuda_toolkit_minimum if _cuda_key(t.cuda) == key]
    rows = rows or [t for t in rules.cuda_toolkit_minimum if _cuda_key(t.cuda) == (*key[:2], 0)]
    if rows and driver_below(driver, rows[0].min_driver):
        return [
            _broken(
                Component.DRIVER,
                f">={rows[0].min_driver}",
                driver,
                "cuda_toolkit_minimum",
                f"CUDA {rows[0].cuda} toolkit needs driver >= {rows[0].min_driver}; runs only "
                "under minor-version compatibility (no PTX JIT of newer code)",
                severity=Severity.WARNING,
            )
        ]
    return []


def _branch_items(
    rules: CompatibilityRules, profile: str, tuple_: Mapping[Component, str], *, today: dt.date
) -> list[DriftItem]:
    driver = tuple_[Component.DRIVER]
    branch = rules.branch_of(driver)
    if branch is None:
        return [
            _broken(
                Component.DRIVER,
                None,
                driver,
                "driver_branch",
                "branch not in the rules table",
                severity=Severity.WARNING,
            )
        ]
    items: list[DriftItem] = []
    name = f"R{branch.prefix} ({branch.type})"
    if today > branch.end_of_life:
        items.append(
            _broken(
                Component.DRIVER,
                None,
                driver,
                "branch_end_of_life",
                f"{name} reached end of life on {branch.end_of_life.isoformat()}",
                severity=Severity.WARNING,
            )
        )
    arch = rules.profile_architecture.get(profile)
    if arch is not None and arch not in branch.architectures:
        items.append(
            _broken(
                Component.DRIVER,
                None,
                driver,
                "branch_architectures",
                f"{name} does not support {arch} (profile {profile})",
            )
        )
    cuda_key = _cuda_key(tuple_.get(Component.CUDA, ""))
    if cuda_key is not None and cuda_key[0] > branch.max_cuda_major:
        items.append(
            _broken(
                Component.CUDA,
                None,
                tuple_[Component.CUDA],
                "branch_max_cuda_major",
                f"{name} runs CUDA <= {branch.max_cuda_major} without a forward-compat package",
            )
        )
    return items


def _gsp_evidence(
    driver: str | None, firmware_dirs: Sequence[str] | None, loaded_module: str | None
) -> list[DriftItem]:
    """Seed 004 evidence: /sys/module/nvidia/version vs /lib/firmware/nvidia/<version>/ dirs."""
    items: list[DriftItem] = []
    if loaded_module is not None and driver is not None and loaded_module != driver:
        items.append(
            _broken(
                Component.GPU_GSP,
                driver,
                loaded_module,
                "gsp_equals_driver",
                f"loaded nvidia module {loaded_module} != driver package {driver} "
                "(seed 004: 'Driver/library version mismatch')",
                kind=DriftKind.GSP_MISMATCH,
            )
        )
    if (
        loaded_module is not None
        and firmware_dirs is not None
        and loaded_module not in firmware_dirs
    ):
        present = ", ".join(sorted(firmware_dirs)) or "none"
        items.append(
            _broken(
                Component.GPU_GSP,
                loaded_module,
                None,
                "gsp_firmware_dir",
                f"no /lib/firmware/nvidia/{loaded_module}/ for the loaded module (present: "
                f"{present}); seed 004: 'RmFetchGspRmImages: No firmware image found'",
                kind=DriftKind.GSP_MISMATCH,
            )
        )
    return items


def check_compatibility(
    profile: str,
    tuple_: Mapping[Component, str],
    *,
    today: dt.date,
    firmware_dirs: Sequence[str] | None = None,
    loaded_module: str | None = None,
    rules: CompatibilityRules,
) -> list[DriftItem]:
    """Every compatibility rule the tuple breaks, as ``incompatible``/``gsp_mismatch`` items.

    Rules needing the driver are skipped while no driver is observed (an in-band report has not
    arrived yet); ``firmware_dirs=None`` means "not reported" (an empty list means none exist).
    An unknown profile has no architecture rule. A non-numeric driver is itself an item.
    """
    driver = tuple_.get(Component.DRIVER)
    items = _gsp_evidence(driver, firmware_dirs, loaded_module)
    if driver is None:
        return items
    if not is_dot_integer(driver):
        return [*items, _broken(Component.DRIVER, None, driver, "driver_version", "not numeric")]
    for invariant in rules.equal_to_driver:
        actual = tuple_.get(invariant.component)
        if actual is not None and actual != driver:
            items.append(
                _broken(
                    invariant.component,
                    driver,
                    actual,
                    invariant.rule,
                    f"{invariant.component} {actual} != driver {driver}; {invariant.note}",
                    kind=invariant.kind,
                )
            )
    items.extend(_branch_items(rules, profile, tuple_, today=today))
    cuda = tuple_.get(Component.CUDA)
    if cuda is not None:
        items.extend(_cuda_items(rules, cuda, driver))
        nccl = tuple_.get(Component.NCCL)
        built = _NCCL_CUDA.search(nccl) if nccl and rules.nccl_matches_cuda_major else None
        if (
            built is not None
            and _cuda_key(cuda) is not None
            and int(built[1]) != int(cuda.split(".")[0])
        ):
            items.append(
                _broken(
                    Component.NCCL,
                    None,
                    nccl,
                    "nccl_matches_cuda_major",
                    f"NCCL built for CUDA {built[1]} but CUDA is {cuda}",
                )
            )
    return items
