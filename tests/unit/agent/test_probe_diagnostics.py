"""DCGM diagnostics and NCCL busbw parsed from real captured outputs: a ``dcgmi diag -r 3 -j``
run of DCGM 3.x on one GPU (microsoft/VirtualClient's example) and an 8x A100
``all_reduce_perf`` run (microsoft/superbenchmark's test data); failing, DCGM 4.x-shaped,
truncated and hostile outputs derived from them."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lockstep_agent.probes.diagnostics import (
    DiagnosticFiles,
    Diagnostics,
    parse_all_reduce,
    parse_dcgm,
    probe_diagnostics,
    read_result,
)
from lockstep_agent.probes.node import NodeFacts
from lockstep_agent.reports import Counters, health_event
from lockstep_common.events.v1 import HealthObserved
from tests.reference import REFERENCE

pytestmark = pytest.mark.unit
DCGM_R3 = REFERENCE / "node-agent" / "virtualclient" / "DCGMIDiag_r3_results.json"
ALL_REDUCE = REFERENCE / "node-agent" / "superbench" / "nccl_allreduce.log"


def test_a_real_level_3_run_passes_with_every_test_counted() -> None:
    diag = parse_dcgm(DCGM_R3.read_text())
    # 9 deployment, PCIe, GPU Memory + Diagnostic + EUD (skipped: no failure), 3 stress.
    assert (diag.passed, diag.failed, diag.tests) == (True, (), 16)


def test_a_failed_test_fails_the_run_and_is_named() -> None:
    doc = json.loads(DCGM_R3.read_text())
    hardware = doc["DCGM GPU Diagnostic"]["test_categories"][2]
    hardware["tests"][0]["results"][0]["status"] = "Fail"
    diag = parse_dcgm("Successfully ran diagnostic for group.\n" + json.dumps(doc))
    assert (diag.passed, diag.failed) == (False, ("Hardware/GPU Memory",))


def test_dcgm_4_output_is_read_from_its_renamed_root_and_test_summary() -> None:
    doc = json.loads(DCGM_R3.read_text())
    categories = doc.pop("DCGM GPU Diagnostic")["test_categories"]
    categories[3]["tests"][1]["test_summary"] = {"status": "Fail"}
    categories[0]["tests"].insert(1, None)  # DCGM prints null entries in a category
    diag = parse_dcgm(json.dumps({"DCGM Diagnostic": {"test_categories": categories}}))
    assert diag.failed == ("Stress/Targeted Power",)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Error: unable to establish a connection to the host engine", "no JSON document"),
        ('{"DCGM GPU Diagnostic": {"test_categories": [', "not JSON"),
        ('{"Other Tool": {"test_categories": []}}', "no test_categories"),
        ('{"DCGM GPU Diagnostic": {"test_categories": []}}', "holds no test"),
    ],
)
def test_output_that_is_not_a_diagnostic_is_refused_by_name(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_dcgm(text)


def test_a_real_8_gpu_all_reduce_run_gives_the_busbw_at_its_largest_size() -> None:
    run = parse_all_reduce(ALL_REDUCE.read_text())
    assert (run.busbw_gbps, run.largest_bytes, run.passed) == (235.26, 8589934592, True)


def test_the_current_table_with_a_root_column_and_wrong_results_fails_the_run() -> None:
    text = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong\n"
        "    16777216       4194304     float     sum      -1    226.0   74.23  129.90      0"
        "    225.0   74.57  130.49      0\n"
        "  8589934592    2147483648     float     sum      -1    63896  134.44  235.26      3"
        "    63959  134.30  235.03      0\n"
        "# Out of bounds values : 3 FAILED\n"
    )
    run = parse_all_reduce(text)
    assert (run.busbw_gbps, run.passed) == (235.26, False)


def test_a_run_cut_short_before_any_row_is_refused() -> None:
    header = "".join(ALL_REDUCE.read_text().splitlines(keepends=True)[:14])
    with pytest.raises(ValueError, match="no all_reduce_perf result rows"):
        parse_all_reduce(header)


def test_a_result_file_larger_than_any_run_writes_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "diag.json"
    big.write_bytes(b" " * (4 << 20) + b"{}")
    with pytest.raises(ValueError, match="larger than"):
        read_result(big)


def _files(tmp_path: Path, dcgm: str, nccl: str, age_s: float = 0.0) -> DiagnosticFiles:
    (tmp_path / "diag.json").write_text(dcgm)
    (tmp_path / "all-reduce.log").write_text(nccl)
    when = time.time() - age_s
    for name in ("diag.json", "all-reduce.log"):
        os.utime(tmp_path / name, (when, when))
    return DiagnosticFiles(
        dcgm=tmp_path / "diag.json",
        dcgm_level=3,
        nccl=tmp_path / "all-reduce.log",
        nccl_expected_gbps=230.0,
        max_age_s=3600,
    )


def _health(diagnostics: Diagnostics) -> HealthObserved:
    facts = NodeFacts(diagnostics=diagnostics)
    return health_event("n1", "s1", facts, 1, Counters(), datetime.now(UTC))


def test_the_health_report_carries_the_node_s_latest_diagnostics(tmp_path: Path) -> None:
    files = _files(tmp_path, DCGM_R3.read_text(), ALL_REDUCE.read_text())
    health = _health(probe_diagnostics(files, time.time()))
    assert (health.dcgm_level, health.dcgm_passed) == (3, True)
    assert (health.nccl_busbw_gbps, health.nccl_expected_gbps) == (235.26, 230.0)


def test_an_nccl_run_with_wrong_results_reports_no_bandwidth(tmp_path: Path) -> None:
    wrong = ALL_REDUCE.read_text().replace(
        "# Out of bounds values : 0 OK", "# Out of bounds values : 2 FAILED"
    )
    health = _health(probe_diagnostics(_files(tmp_path, DCGM_R3.read_text(), wrong), time.time()))
    assert health.nccl_busbw_gbps == 0.0


def test_stale_unreadable_or_missing_results_are_not_reported(tmp_path: Path) -> None:
    stale = probe_diagnostics(
        _files(tmp_path, DCGM_R3.read_text(), ALL_REDUCE.read_text(), age_s=7200), time.time()
    )
    assert (stale.dcgm, stale.nccl) == (None, None)
    assert all("not reported" in e for e in stale.errors) and len(stale.errors) == 2
    broken = probe_diagnostics(
        _files(tmp_path, "Error: no host engine", "# nThread 1"), time.time()
    )
    assert (broken.dcgm, broken.nccl) == (None, None)
    assert [e.split(": ", 1)[1] for e in broken.errors] == [
        "no JSON document in the dcgmi output",
        "no all_reduce_perf result rows",
    ]
    health = _health(broken)
    assert (health.dcgm_passed, health.nccl_busbw_gbps) == (None, None)
    none_yet = DiagnosticFiles(dcgm=tmp_path / "absent.json", nccl=tmp_path / "absent.log")
    assert probe_diagnostics(none_yet, time.time()) == Diagnostics()
