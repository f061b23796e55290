"""The optional GPU diagnostics a node may run besides the agent: DCGM's ``dcgmi diag -r N -j``
and nccl-tests' ``all_reduce_perf``, read from the result files a job epilog or a timer writes
(the agent never runs a minutes-long diagnostic inside its report cycle).

- DCGM (``dcgmi diag -j``): DCGM 3.x prints ``{"DCGM GPU Diagnostic": {"test_categories": [...]}}``
  with one ``results`` entry per GPU (or one for the node's software checks); DCGM 4.x renamed
  the root ``"DCGM Diagnostic"`` and adds a ``test_summary`` per test (DCGM release notes, 4.0
  "Deprecations and breaking changes"). ``dcgmi`` may print a line before the document
  ("Successfully ran diagnostic for group."), and a category may hold ``null`` entries: both
  are skipped. A test fails when any of its results (or its summary) is ``Fail``; ``Warn`` and
  ``Skip`` do not fail the node (NVIDIA, DCGM user guide, "Diagnostics": skip means not run).
- NCCL (``all_reduce_perf``): the rows of the size table (``size count type redop [root] time
  algbw busbw #wrong time algbw busbw #wrong``, nccl-tests ``doc/PERFORMANCE.md``); the busbw
  reported is the out-of-place busbw at the largest size, where it is a property of the links
  rather than of latency. A row with wrong results, or "Out of bounds values : N FAILED", marks
  the run as failed: its bandwidth proves nothing.

Each parser returns a typed result or raises ``ValueError`` naming what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")  # DCGM 3.x, 4.x
MAX_RESULT_BYTES = 4 << 20  # a full level-4 run of 8 GPUs is well under 1 MiB
T = TypeVar("T")


class DcgmDiag(BaseModel):
    """One ``dcgmi diag`` run."""

    model_config = ConfigDict(frozen=True)

    passed: bool
    failed: tuple[str, ...] = ()
    """``category/test`` of each failed test."""
    tests: int = 0


class NcclBusbw(BaseModel):
    """One ``all_reduce_perf`` run."""

    model_config = ConfigDict(frozen=True)

    busbw_gbps: float
    """Out-of-place bus bandwidth at the largest size (GB/s)."""
    largest_bytes: int
    passed: bool
    """No row with wrong results, no out-of-bounds values."""


def parse_dcgm(text: str) -> DcgmDiag:
    """``dcgmi diag -j`` output (3.x or 4.x) as pass/fail with the failed tests."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON document in the dcgmi output")
    try:
        doc = json.loads(text[start:])
    except ValueError as exc:
        raise ValueError(f"dcgmi output is not JSON: {exc}") from None
    root = next((doc[k] for k in ROOTS if isinstance(doc, dict) and k in doc), None)
    categories = root.get("test_categories") if isinstance(root, dict) else None
    if not isinstance(categories, list):
        raise ValueError(  # noqa: TRY004 - bad input, as every parser here says it
            f"no test_categories under {' or '.join(map(repr, ROOTS))}"
        )
    failed: list[str] = []
    count = 0
    for category in (c for c in categories if isinstance(c, dict)):
        for test in (t for t in category.get("tests") or () if isinstance(t, dict)):
            count += 1
            if "fail" in _statuses(test):
                failed.append(f"{category.get('category', '?')}/{test.get('name', '?')}")
    if count == 0:
        raise ValueError("the dcgmi output holds no test")
    return DcgmDiag(passed=not failed, failed=tuple(failed), tests=count)


def _statuses(test: dict[str, Any]) -> set[str]:
    summary = test.get("test_summary")
    results = test.get("results")
    found = [summary] if isinstance(summary, dict) else []
    found += [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []
    return {str(r.get("status", "")).lower() for r in found}


def parse_all_reduce(text: str) -> NcclBusbw:
    """``all_reduce_perf`` output as the busbw at its largest size."""
    rows: list[tuple[int, float, bool]] = []
    passed = True
    for line in text.splitlines():
        if line.startswith("# Out of bounds values") and "FAILED" in line:
            passed = False
        fields = line.split()
        # size count type redop [root] time algbw busbw #wrong time algbw busbw #wrong
        if len(fields) not in (12, 13) or not fields[0].isdigit() or not fields[1].isdigit():
            continue
        head = 5 if len(fields) == 13 else 4
        try:
            busbw = float(fields[head + 2])
        except ValueError:
            continue
        wrong = fields[head + 3]
        rows.append((int(fields[0]), busbw, wrong in {"0", "N/A"}))
    if not rows:
        raise ValueError("no all_reduce_perf result rows")
    size, busbw, clean = max(rows, key=lambda r: r[0])
    passed = passed and all(ok for _, _, ok in rows)
    return NcclBusbw(busbw_gbps=busbw, largest_bytes=size, passed=passed and clean)


def read_result(path: Path) -> str:
    """A result file's text (``OSError`` when it cannot be read; ``ValueError`` when larger
    than any real run writes)."""
    with path.open("rb") as f:
        data = f.read(MAX_RESULT_BYTES + 1)
    if len(data) > MAX_RESULT_BYTES:
        raise ValueError(f"{path}: larger than {MAX_RESULT_BYTES} bytes")
    return data.decode("utf-8", "replace")


class DiagnosticFiles(BaseModel):
    """Where this node's diagnostics write their results (the agent's configuration)."""

    model_config = ConfigDict(frozen=True)

    dcgm: Path | None = None
    dcgm_level: int = 1
    nccl: Path | None = None
    nccl_expected_gbps: float | None = None
    max_age_s: float = 86400.0


class Diagnostics(BaseModel):
    """The latest diagnostics found, and why any could not be used."""

    model_config = ConfigDict(frozen=True)

    dcgm: DcgmDiag | None = None
    dcgm_level: int | None = None
    nccl: NcclBusbw | None = None
    nccl_expected_gbps: float | None = None
    errors: tuple[str, ...] = ()


def probe_diagnostics(files: DiagnosticFiles, now: float) -> Diagnostics:
    """Read the result files (``now``: epoch seconds). A file that is not there is no result
    (the epilog has not run yet); one older than ``max_age_s`` is not reported (a result of
    last month says nothing about the node today); one that cannot be parsed is named in
    ``errors``, never a crash."""
    errors: list[str] = []
    dcgm = _fresh(files.dcgm, files.max_age_s, now, parse_dcgm, errors)
    nccl = _fresh(files.nccl, files.max_age_s, now, parse_all_reduce, errors)
    return Diagnostics(
        dcgm=dcgm,
        dcgm_level=files.dcgm_level if dcgm is not None else None,
        nccl=nccl,
        nccl_expected_gbps=files.nccl_expected_gbps if nccl is not None else None,
        errors=tuple(errors),
    )


def _fresh(
    path: Path | None,
    max_age_s: float,
    now: float,
    parse: Callable[[str], T],
    errors: list[str],
) -> T | None:
    if path is None:
        return None
    try:
        age = now - path.stat().st_mtime
        if age > max_age_s:
            errors.append(f"{path}: {age:.0f}s old (more than {max_age_s:g}s): not reported")
            return None
        return parse(read_result(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        errors.append(f"{path}: {exc}")
        return None
