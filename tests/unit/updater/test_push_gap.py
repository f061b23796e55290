"""The profile's minimum gap between two pushes to one BMC (NVIDIA nvfwupd ``UPDATE_DELAY``:
pushes back to back exhaust a GB200 BMC's memory): a push waits (``NotYet``, tried again after
``retry_s``) until the gap since the last push to the same BMC has passed, whichever of this
process's work items sent it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import pytest

from lockstep_common.events.v1 import FleetNode
from lockstep_redfish.profile import profile_named
from lockstep_updater.domain.progress import ComponentPlan, PushTask, UpdateProgress
from lockstep_updater.steps.context import StepContext
from lockstep_updater.steps.ends import NotYet
from lockstep_updater.steps.policy import ExecutorPolicy
from lockstep_updater.steps.push import _keep_gap

pytestmark = pytest.mark.unit
GB200 = profile_named("nvidia-gb200-nvl")  # min_gap_s 30


@dataclass
class Sessions:
    pushed: dict[str, float] = field(default_factory=dict)


@dataclass
class Clock:
    now: float
    sessions: Sessions = field(default_factory=Sessions)
    policy: ExecutorPolicy = field(default_factory=ExecutorPolicy)

    def wall(self) -> float:
        return self.now


def node(n: int) -> FleetNode:
    return FleetNode(
        node_id=f"n{n}",
        site="s",
        profile="gb200",
        bmc_url=f"https://bmc-{n}.example",
        credentials="env:BMC",
    )


NODE, OTHER = node(1), node(2)


def progress(pushed_at: float | None) -> UpdateProgress:
    sent = ComponentPlan(version="2", banks="ab", targets=["/a"], before={}, sent=True)
    if pushed_at is not None:
        sent.task = PushTask(monitor="/t/1", since=pushed_at)
    nic = ComponentPlan(version="3", banks="ab", targets=["/b"], before={})
    return UpdateProgress(components={"gpu_vbios": sent, "nic": nic})


def test_a_push_waits_for_the_profiles_gap_after_the_last_push_to_its_bmc() -> None:
    ctx = cast(StepContext, Clock(1000.0 + 12))
    with pytest.raises(NotYet, match=r"nic: 18s more between pushes to this BMC"):
        _keep_gap(ctx, NODE, GB200, progress(1000.0), "nic")


def test_a_push_goes_once_the_gap_passed_or_where_none_is_declared() -> None:
    _keep_gap(cast(StepContext, Clock(1030.0)), NODE, GB200, progress(1000.0), "nic")
    generic = profile_named("dmtf-generic")
    _keep_gap(cast(StepContext, Clock(1001.0)), NODE, generic, progress(1000.0), "nic")
    _keep_gap(cast(StepContext, Clock(1001.0)), NODE, None, progress(1000.0), "nic")
    _keep_gap(cast(StepContext, Clock(1001.0)), NODE, GB200, progress(None), "nic")  # first


def test_the_gap_holds_after_another_items_push_to_the_same_bmc() -> None:
    # An update pushed at 1000; a flip-back (another item, its progress empty) at 1010.
    ctx = Clock(1010.0)
    ctx.sessions.pushed[NODE.bmc_url] = 1000.0
    with pytest.raises(NotYet, match=r"nic: 20s more between pushes to this BMC"):
        _keep_gap(cast(StepContext, ctx), NODE, GB200, progress(None), "nic")
    _keep_gap(cast(StepContext, ctx), OTHER, GB200, progress(None), "nic")  # another BMC
    ctx.now = 1030.0
    _keep_gap(cast(StepContext, ctx), NODE, GB200, progress(None), "nic")


def test_a_gap_set_for_the_updater_replaces_the_profiles() -> None:
    """``push_gap_s`` (a lab whose BMCs take pushes back to back, or a test) stands instead of
    the profile's 30 s, and still holds between two pushes to one BMC."""
    ctx = Clock(1001.0, policy=ExecutorPolicy(push_gap_s=2.0))
    with pytest.raises(NotYet, match=r"nic: 1s more between pushes to this BMC"):
        _keep_gap(cast(StepContext, ctx), NODE, GB200, progress(1000.0), "nic")
    ctx.now = 1002.0
    _keep_gap(cast(StepContext, ctx), NODE, GB200, progress(1000.0), "nic")
