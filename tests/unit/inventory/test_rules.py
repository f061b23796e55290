"""Compatibility rules (standards.md section 7, seed 004) and the table's own validation."""

from __future__ import annotations

import datetime as dt
import json
from importlib import resources
from typing import Any

import pytest

from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.compatibility.rules import (
    RulesError,
    check_compatibility,
    driver_below,
    parse_rules,
)
from lockstep_common.events.v1 import DriftItem
from lockstep_common.vocabulary import Component, DriftKind, Severity

pytestmark = pytest.mark.unit
C = Component
TODAY = dt.date(2026, 5, 1)
RULES = packaged_rules()
GOOD = {
    C.DRIVER: "580.65.06",
    C.CUDA: "13.0.0",
    C.GPU_GSP: "580.65.06",
    C.FABRIC_MANAGER: "580.65.06",
    C.NCCL: "2.27.3+cuda13.0",
}


def _rules_named(items: list[DriftItem]) -> set[str]:
    return {i.detail.split(":", 1)[0].removeprefix("rule ") for i in items}


def test_a_conforming_gb200_tuple_has_no_items() -> None:
    items = check_compatibility(
        "gb200",
        GOOD,
        today=TODAY,
        rules=RULES,
        firmware_dirs=["580.65.06"],
        loaded_module="580.65.06",
    )
    assert items == []


def test_cuda_12_needs_driver_at_least_525_60_13() -> None:
    items = check_compatibility(
        "hgx-h100", {C.DRIVER: "520.61.05", C.CUDA: "12.4.1"}, today=TODAY, rules=RULES
    )
    floor = [i for i in items if "cuda_major_floor" in i.detail]
    assert len(floor) == 1
    assert floor[0].kind is DriftKind.INCOMPATIBLE
    assert floor[0].severity is Severity.CRITICAL
    assert floor[0].expected == ">=525.60.13"
    assert floor[0].actual == "520.61.05"


def test_cuda_13_needs_driver_580() -> None:
    items = check_compatibility(
        "hgx-h100", {C.DRIVER: "575.57.08", C.CUDA: "13.0"}, today=TODAY, rules=RULES
    )
    assert "cuda_major_floor" in _rules_named(items)


def test_toolkit_minimum_above_the_floor_is_a_warning() -> None:
    # CUDA 12.8 GA needs 570.26 (standards.md 7, [S]); 560.35.05 runs it under minor-version
    # compatibility only.
    items = check_compatibility(
        "hgx-h100", {C.DRIVER: "560.35.05", C.CUDA: "12.8"}, today=TODAY, rules=RULES
    )
    toolkit = [i for i in items if "cuda_toolkit_minimum" in i.detail]
    assert [(i.expected, i.severity) for i in toolkit] == [(">=570.26", Severity.WARNING)]


def test_gsp_firmware_must_equal_the_driver() -> None:
    items = check_compatibility(
        "gb200", {**GOOD, C.GPU_GSP: "570.172.08"}, today=TODAY, rules=RULES
    )
    assert [(i.kind, i.component, i.expected, i.actual) for i in items] == [
        (DriftKind.GSP_MISMATCH, C.GPU_GSP, "580.65.06", "570.172.08")
    ]
    assert "gsp_equals_driver" in items[0].detail


def test_seed_004_evidence_loaded_module_without_its_firmware_dir() -> None:
    # Seed 004: module 570.172.08 loaded, /lib/firmware/nvidia/570.172.08/ missing.
    items = check_compatibility(
        "hgx-h100",
        GOOD,
        today=TODAY,
        rules=RULES,
        firmware_dirs=["580.65.06"],
        loaded_module="570.172.08",
    )
    assert {i.kind for i in items} == {DriftKind.GSP_MISMATCH}
    assert _rules_named(items) == {"gsp_equals_driver", "gsp_firmware_dir"}
    missing_dir = next(i for i in items if "gsp_firmware_dir" in i.detail)
    assert "/lib/firmware/nvidia/570.172.08/" in missing_dir.detail
    assert "RmFetchGspRmImages" in missing_dir.detail


def test_firmware_dirs_not_reported_is_not_evidence() -> None:
    items = check_compatibility("gb200", GOOD, today=TODAY, rules=RULES, loaded_module="580.65.06")
    assert items == []


def test_end_of_life_branch_is_a_warning_after_its_date() -> None:
    tuple_ = {C.DRIVER: "535.230.02", C.CUDA: "12.2.2"}
    assert check_compatibility("hgx-h100", tuple_, today=dt.date(2026, 6, 30), rules=RULES) == []
    items = check_compatibility("hgx-h100", tuple_, today=dt.date(2026, 7, 1), rules=RULES)
    assert [(i.severity, "branch_end_of_life" in i.detail) for i in items] == [
        (Severity.WARNING, True)
    ]
    assert "R535 (long-term)" in items[0].detail


def test_architecture_unsupported_by_the_branch() -> None:
    items = check_compatibility("gb200", {C.DRIVER: "535.230.02"}, today=TODAY, rules=RULES)
    assert _rules_named(items) == {"branch_architectures"}
    assert "blackwell" in items[0].detail
    assert check_compatibility("hgx-h100", {C.DRIVER: "535.230.02"}, today=TODAY, rules=RULES) == []


def test_fabric_manager_must_equal_the_driver() -> None:
    items = check_compatibility(
        "gb200", {**GOOD, C.FABRIC_MANAGER: "580.82.07"}, today=TODAY, rules=RULES
    )
    assert [(i.kind, i.component) for i in items] == [(DriftKind.INCOMPATIBLE, C.FABRIC_MANAGER)]


def test_nccl_built_for_another_cuda_major() -> None:
    items = check_compatibility(
        "gb200", {**GOOD, C.NCCL: "2.21.5+cuda12.4"}, today=TODAY, rules=RULES
    )
    assert _rules_named(items) == {"nccl_matches_cuda_major"}


def test_branch_max_cuda_major() -> None:
    items = check_compatibility(
        "hgx-h100", {C.DRIVER: "535.230.02", C.CUDA: "13.0"}, today=TODAY, rules=RULES
    )
    assert {"branch_max_cuda_major", "cuda_major_floor"} <= _rules_named(items)


def test_unknown_branch_and_non_numeric_driver() -> None:
    unknown = check_compatibility("hgx-h100", {C.DRIVER: "999.1"}, today=TODAY, rules=RULES)
    assert _rules_named(unknown) == {"driver_branch"}
    bad = check_compatibility("hgx-h100", {C.DRIVER: "latest"}, today=TODAY, rules=RULES)
    assert _rules_named(bad) == {"driver_version"}


def test_no_driver_observed_skips_driver_rules() -> None:
    assert (
        check_compatibility("gb200", {C.CUDA: "13.0", C.BMC: "x"}, today=TODAY, rules=RULES) == []
    )


def test_packaged_table_holds_the_standards_rows() -> None:
    rules = RULES
    assert {f.cuda_major: f.min_driver for f in rules.cuda_major_floor} == {
        13: "580",
        12: "525.60.13",
        11: "450.80.02",
    }
    assert len(rules.cuda_toolkit_minimum) == 22  # 13.0 GA and every 12.x GA/update row
    assert {b.prefix for b in rules.branches} == {"535", "550", "570", "580", "595", "610"}
    assert rules.profile_architecture == {"gb200": "blackwell", "hgx-h100": "hopper"}
    assert driver_below("570.86.10", "570.172.08")  # as numbers: 86 < 172
    assert not driver_below("570.172.08", "570.172.8")  # leading zeros do not count


def _table() -> dict[str, Any]:
    resource = resources.files("lockstep_common.compatibility").joinpath("data/compatibility.json")
    data: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t["branches"].append(dict(t["branches"][0])), "duplicate branches.prefix: 535"),
        (lambda t: t["branches"][0].update(end_of_life="June 2026"), "branches.0.end_of_life"),
        (
            lambda t: t["cuda_major_floor"][0].update(cuda_major="13"),
            "cuda_major_floor.0.cuda_major",
        ),
        (lambda t: t["cuda_toolkit_minimum"][0].update(min_driver="580.x"), "min_driver"),
        (lambda t: t["branches"][0].update(type="lts"), "branches.0.type"),
        (lambda t: t.update(surprise=1), "surprise"),
        (lambda t: t["equal_to_driver"][0].update(kind="pending"), "kind must be one of"),
        (lambda t: t.pop("branches"), "branches: Field required"),
    ],
)
def test_a_malformed_table_is_refused_with_a_clear_error(mutate: Any, message: str) -> None:
    table = _table()
    mutate(table)
    with pytest.raises(RulesError, match="invalid compatibility rules") as raised:
        parse_rules(json.dumps(table))
    assert message in str(raised.value)


def test_not_json_is_refused() -> None:
    with pytest.raises(RulesError, match="Invalid JSON"):
        parse_rules("{")
