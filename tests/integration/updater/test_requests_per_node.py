"""Redfish requests per node for a whole update (issue 28 item 3: pay per node, not per step),
counted at the client: every request the updater sends a node's BMC from preflight to given
back, the unauthenticated service root included, on each shipped dialect. A load-independent
figure: it moves with what the updater asks, not with the machine's speed (the task monitor's
polls, which do, are left out of the bound).

Before the collections were read with ``$expand`` (``lockstep_redfish.expand``) a GB200 node
cost 79 such requests (its 31 FirmwareInventory members read one by one for the profile, then
its GPUs' members at each step, and again for their devices' PCI ids), HGX 111, Supermicro 60,
the DMTF generic profile 63."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from lockstep_redfish import transport
from lockstep_sim import server
from lockstep_updater.domain.steps import NodeStep
from tests.integration.updater import test_dialect_rollouts
from tests.integration.updater.conftest import World
from tests.integration.updater.test_dialect_rollouts import Case, _plan, _release

pytestmark = pytest.mark.integration
dialect_world = test_dialect_rollouts.dialect_world  # one update per shipped dialect
BOUND = {"nvidia-gb200-nvl": 24, "nvidia-hgx": 24, "supermicro-x13": 25, "dmtf-generic": 30}
"""Requests per node but the task polls (measured 20, 20, 21, 26; the verify's read back polls
at most a few more on a slow machine)."""
FW = "/redfish/v1/UpdateService/FirmwareInventory"


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str]]:
    """(method, path) of every request sent to a BMC."""
    counts: Counter[tuple[str, str]] = Counter()
    real = transport.request

    async def counting(http: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        counts[(method, "/" + url.split("/", 3)[-1])] += 1
        return await real(http, method, url, *args, **kwargs)

    monkeypatch.setattr("lockstep_redfish.session.request", counting)
    return counts


async def _update_one(w: World, case: Case) -> None:
    node = ("node-00000",)
    await _plan(w, case, [node])
    await _release(w, case, 0, node)
    await w.settle()
    item = w.store.item(node[0])
    assert item.state is NodeStep.DONE, item.reason


def _not_polls(sent: Counter[tuple[str, str]]) -> int:
    return sum(n for (_, path), n in sent.items() if "/TaskService/" not in path)


async def test_a_whole_update_costs_a_bounded_number_of_requests_per_node(
    dialect_world: tuple[World, Case, list[dict[str, Any]]], sent: Counter[tuple[str, str]]
) -> None:
    w, case, _ = dialect_world
    await _update_one(w, case)
    assert _not_polls(sent) <= BOUND[case.dialect], sorted(sent.items())
    assert sent[("POST", "/redfish/v1/SessionService/Sessions")] == 1  # one login per node
    # No member read one by one at every step: at most before the write, before the
    # activation and the read-back (read-before-write; one target is read alone, not expanded).
    members = {path for (_, path), n in sent.items() if path.startswith(f"{FW}/") and n > 3}
    assert not members, members


async def test_a_bmc_that_advertises_expand_and_does_not_expand_is_still_updated(
    dialect_world: tuple[World, Case, list[dict[str, Any]]],
    sent: Counter[tuple[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w, case, _ = dialect_world
    monkeypatch.setattr(server, "expand", lambda bmc, doc, query: doc)  # links, as asked for none
    await _update_one(w, case)
    assert sent[("GET", f"{FW}?$expand=.($levels=1)")] >= 1
    listed = w.rt.simulator.bmc("node-00000").node.components
    read = {path.removeprefix(f"{FW}/") for (_, path), _n in sent.items()}
    assert set(listed) <= read  # the links it answered, each read with its own GET
