"""A rollout onto a ``dmtf-generic`` BMC that offers only the HTTP push update (no
MultipartHttpPushUri, no SimpleUpdate; DSP0266 "HTTP push update", the profile's last push
method): preflight passes, the image goes to ``HttpPushUri`` once, to the targets PATCHed onto
UpdateService, and the node is verified at the new version."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lockstep_updater.domain.steps import NodeStep
from tests.integration.updater.conftest import World
from tests.integration.updater.test_dialect_rollouts import (
    CASES,
    LOGINS,
    Case,
    _plan,
    _release,
    _versions,
    dialect_world,
)

pytestmark = pytest.mark.integration
__all__ = ["dialect_world"]
NODE = "node-00000"
GENERIC = next(c for c in CASES if c.dialect == "dmtf-generic")


@pytest.mark.parametrize("dialect_world", [GENERIC], ids=["dmtf-generic"], indirect=True)
async def test_a_bmc_offering_only_http_push_is_updated_through_it(
    dialect_world: tuple[World, Case, list[dict[str, Any]]],
) -> None:
    w, case, sent = dialect_world
    bmc = w.rt.simulator.bmc(NODE)
    bmc.multipart_push, bmc.http_push = False, True
    bmc.dialect = dataclasses.replace(bmc.dialect, simple_update=False)
    await _plan(w, case, [(NODE,)])
    await _release(w, case, 0, (NODE,))
    await w.settle()

    item = w.store.item(NODE)
    assert item.state is NodeStep.DONE, item.reason
    assert _versions(w, NODE, case) == {case.version}
    calls = [e["action"] for e in bmc.ledger if e["action"] not in LOGINS]
    assert calls == ["patch", "update", "patch", case.reset]
    (push,) = [e for e in bmc.ledger if e["action"] == "update"]
    assert push["targets"] == case.targets and push["status"] == 204  # synchronous (DSP0266)
    assert bmc.http_push_apply_time == "OnReset" and not bmc.http_push_busy
    assert sent == []  # no multipart push
