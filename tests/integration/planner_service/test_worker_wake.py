"""A committed intent wakes the planner's worker (migration 0005's NOTIFY): it is planned at
once, not at the worker's next poll (issue 27, item 3: intent in to ``rollout.planned`` out)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lockstep_cli.polling import until
from lockstep_common import subjects
from lockstep_planner.app import create_app
from lockstep_planner.testing.kit import attested, intent
from tests.integration.planner_service.conftest import Planner

pytestmark = pytest.mark.integration
POLL_S = 600.0  # longer than the test may take: only the wake can start the worker's pass


async def test_an_intent_is_planned_without_waiting_for_the_workers_poll(
    planner: Planner, tmp_path: Path
) -> None:
    await planner.app.stop()
    planner.settings = planner.settings.model_copy(update={"worker_poll_s": POLL_S})
    planner.app = create_app(planner.settings)
    await planner.app.start()
    bundle = attested()
    await planner.publish(subjects.bundle_attested(), bundle)

    async def known() -> Any:
        return await planner.app.require().pool.fetchval("SELECT count(*) FROM bundles")

    await until(known, what="bundle recorded")
    data = intent(bundle)
    await planner.publish(subjects.intent_submitted(), data)

    async def decided() -> Any:
        return await planner.app.require().pool.fetchval(
            "SELECT state FROM intents WHERE intent_id = $1 AND state IN ('planned', 'refused')",
            data.intent_id,
        )

    # Well under POLL_S: without the wake the worker's first idle wait would outlast this.
    assert await until(decided, what="the intent decided", timeout_s=30) == "planned"
