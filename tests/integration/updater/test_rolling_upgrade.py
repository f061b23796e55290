"""A rolling upgrade of the updater (issue 28 item 2): the previous release's executor
(``tests/data/updater/previous-release/``, kept verbatim) stops at each of its writes and this
release's resumes the node mid-step from the progress the other stored; and the other way
round, as while both releases run during the upgrade. Either way the node ends verified, with
exactly one accepted push and Lockstep's drain given back."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lockstep_redfish.privileges import account_refusal
from lockstep_redfish.profile import profile_named
from lockstep_updater.adapters.images import BundleImages
from lockstep_updater.adapters.sim_scheduler import SimScheduler
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.ports import OWNER
from tests.integration.sim.pldm_fixtures import NEW_GPU_VERSION
from tests.integration.updater.conftest import ENV, FAST, World
from tests.integration.updater.test_executor_sim import nodes_of, plan_and_release
from tests.integration.updater.test_kill_restart import CLEAN_RUN_WRITES, Killed, KillingStore

pytestmark = pytest.mark.integration
PREVIOUS = Path(__file__).resolve().parents[2] / "data" / "updater" / "previous-release"


def _module(name: str, source: str) -> ModuleType:
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    exec(compile(source, f"<previous {name}>", "exec"), module.__dict__)  # noqa: S102 - our own file
    return module


def previous_release() -> ModuleType:
    """The previous release's executor module (its in-band step loaded beside it)."""
    if "previous_updater_executor" in sys.modules:
        return sys.modules["previous_updater_executor"]
    _module("previous_updater_inband_step", (PREVIOUS / "inband_step.py.txt").read_text())
    source = (PREVIOUS / "executor.py.txt").read_text()
    source = source.replace("lockstep_updater.inband_step", "previous_updater_inband_step")
    # Moved since (one reading of an account's privileges, shared with ``lockstep bmc probe``).
    source = source.replace("lockstep_updater.adapters.bmc_account", "lockstep_redfish.accounts")
    # Moved since (least privilege per BMC profile, lockstep_redfish.privileges): the previous
    # release knew no profile and flashed the simulator's (lockstep-sim) by the Operator rule.
    source = source.replace(
        "from lockstep_updater.domain.privilege import account_refusal",
        "from tests.integration.updater.test_rolling_upgrade import previous_account_refusal"
        " as account_refusal",
    )
    return _module("previous_updater_executor", source)


def previous_account_refusal(roles: Iterable[str], privileges: Iterable[str]) -> str | None:
    """The previous release's ``account_refusal(roles, privileges)``: this release's rule for
    the profile it flashed (the simulator's own, whose calls need what Operator holds)."""
    return account_refusal(profile_named("lockstep-sim"), privileges, roles)


def previous_executor(w: World, store: Any) -> Any:
    """The previous release's executor on the world, as ``sim_executor`` wires this one's."""
    return previous_release().Executor(
        store,
        w.facts,
        SimScheduler(w.rt.scheduler_url),
        BundleImages([w.bundle.parent]),
        FAST,
        environ=ENV,
    )


@pytest.mark.parametrize("at", range(1, CLEAN_RUN_WRITES + 1))
@pytest.mark.parametrize("first", ["previous", "this"])
async def test_one_release_stops_at_any_write_and_the_other_finishes_the_node(
    world: World, at: int, first: str
) -> None:
    w = world
    (node,) = nodes_of(w, 1)
    await plan_and_release(w, (node,))
    stopping = KillingStore(w.store, at)
    if first == "previous":
        old, new = previous_executor(w, stopping), w.executor()
        with pytest.raises(Killed):
            await w.settle(old)
        resuming = new
    else:
        with pytest.raises(Killed):
            await w.settle(w.executor(stopping))
        resuming = previous_executor(w, w.store)
    w.store.advance(FAST.lease_s + 1)  # the stopped holder's lease lapses
    await w.settle(resuming)
    item = w.store.item(node)
    assert item.state is NodeStep.DONE, item.reason
    assert len(w.pushes(node)) == 1
    assert w.gpu_versions(node) == {NEW_GPU_VERSION}
    assert w.rt.scheduler.node(node).drain is None
    owned = [e.action for e in w.rt.scheduler.ledger if e.node_id == node and e.by == OWNER]
    assert owned[-1] == "resume"
