"""The executor's steps as a table (issue 28 item 1): ``steps.STEPS`` runs exactly the working
states of ``domain.steps.ALLOWED``, each step declares the moves the table allows it, every kind
of work item that can be claimed has a preflight, and no step reads the time but through the
context's clock."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lockstep_updater.domain.steps import ALLOWED, INITIAL, TERMINAL, NodeStep
from lockstep_updater.steps import STEPS
from lockstep_updater.store import REMEDY, ROLLBACK, UPDATE

pytestmark = pytest.mark.unit
PACKAGE = Path(__file__).resolve().parents[3] / "services/updater/src/lockstep_updater"


def test_every_working_state_has_a_step_and_no_other_state_has_one() -> None:
    working = set(NodeStep) - TERMINAL - {INITIAL}
    assert set(STEPS) == working


@pytest.mark.parametrize("state", sorted(STEPS), ids=str)
def test_each_step_leads_where_the_table_allows(state: NodeStep) -> None:
    assert STEPS[state].leads_to == ALLOWED[state]


def test_every_claimable_kind_has_its_own_preflight() -> None:
    preflight = STEPS[NodeStep.PREFLIGHT]
    runs = {kind: preflight.runner(kind) for kind in (UPDATE, ROLLBACK, REMEDY)}
    assert len(set(runs.values())) == 3
    later = set(STEPS) - {NodeStep.PREFLIGHT}
    assert all(not STEPS[s].by_kind for s in later)  # from cordoning on, one path for all


def test_the_executor_and_its_steps_read_time_only_through_the_clock() -> None:
    sources = [PACKAGE / "executor.py", *sorted((PACKAGE / "steps").glob("*.py"))]
    direct = re.compile(r"\btime\.(time|monotonic)\(|datetime\.now\(|\bimport time\b")
    offenders = [
        f"{path.name}:{n}"
        for path in sources
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if direct.search(line)
    ]
    assert offenders == []


def test_a_step_writes_only_through_its_context() -> None:
    """No step opens a transaction or reaches the executor: the fence, the guard and every
    write go through ``StepContext`` (a step that wrote around it could skip the fence)."""
    steps = [p for p in sorted((PACKAGE / "steps").glob("*.py")) if p.name != "context.py"]
    around = re.compile(r"\.transaction\(|\bExecutor\b|lockstep_updater\.executor")
    offenders = [
        f"{path.name}:{n}"
        for path in steps
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if around.search(line)
    ]
    assert offenders == []


def test_no_updater_module_is_over_400_lines() -> None:
    over = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if len(path.read_text().splitlines()) > 400
    }
    assert over == set()
