"""The updater's Kubernetes adapter (``adapters.k8s_scheduler``) through the official client,
against the fake API server of ``tests/integration/k8s_fake.py`` (a fake: no real Kubernetes
API server can run here): cordon with Lockstep's annotation, evictions that a
PodDisruptionBudget refuses retried with a doubling backoff and never a delete, DaemonSet pods
left alone, a foreign cordon recognised and kept, resume only of Lockstep's own cordon."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lockstep_updater.adapters.k8s_scheduler import (
    CORDON_REASON,
    CORDONED_BY,
    KubernetesScheduler,
)
from lockstep_updater.ports import OWNER, DrainState, ForeignDrain, SchedulerUnavailable
from tests.integration.k8s_fake import FakeKubernetes

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def fake() -> AsyncIterator[FakeKubernetes]:
    async with FakeKubernetes(["gpu-1", "gpu-2"]) as k8s:
        yield k8s


def adapter(fake: FakeKubernetes, tmp_path: Path, clock: Clock) -> KubernetesScheduler:
    return KubernetesScheduler.from_kubeconfig(
        fake.kubeconfig(tmp_path / "kubeconfig"), backoff_s=1.0, backoff_max_s=4.0, clock=clock
    )


async def test_cordon_evicts_then_drained_then_resume_gives_the_node_back(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    k8s = adapter(fake, tmp_path, Clock())
    assert await k8s.drain_state("gpu-1") is DrainState.NOT_DRAINED
    await k8s.cordon("gpu-1", "lockstep rollout r-1")
    node = fake.nodes["gpu-1"]
    assert node.unschedulable
    assert node.annotations == {CORDONED_BY: OWNER, CORDON_REASON: "lockstep rollout r-1"}
    assert [(e.name, e.status) for e in fake.evictions] == [("train-gpu-1", 201)]
    assert fake.evictions[0].body["kind"] == "Eviction"
    assert await k8s.drain_state("gpu-1") is DrainState.DRAINED  # the DaemonSet pod stays
    assert await k8s.own_drains() == ["gpu-1"]  # what the reaper's stray sweep lists
    assert ("kube-system", "dcgm-gpu-1") in fake.pods
    assert await k8s.resume("gpu-1") is True
    assert not node.unschedulable and node.annotations == {}
    assert fake.nodes["gpu-2"].version == 1  # another node untouched
    assert fake.deletes == []


async def test_a_pdb_refusal_is_retried_with_a_doubling_backoff_and_never_forced(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    clock = Clock()
    k8s = adapter(fake, tmp_path, clock)
    fake.block("gpu-1")
    tried_at = []
    for tick in range(16):  # the executor's drain polls, every 0.5 s of the adapter's clock
        clock.now = tick * 0.5
        before = len(fake.evictions)
        await k8s.cordon("gpu-1", "r-1")
        if len(fake.evictions) > before:
            tried_at.append(clock.now)
        assert await k8s.drain_state("gpu-1") is DrainState.DRAINING
    assert tried_at == [0.0, 1.0, 3.0, 7.0]  # pauses of 1, 2 and 4 s (the cap)
    assert {e.status for e in fake.evictions} == {429}
    assert all("deleteOptions" not in e.body for e in fake.evictions)  # never a forced one
    blocker = k8s.drain_blocker("gpu-1")
    assert blocker is not None and blocker.startswith("pdb: eviction of ml/train-gpu-1 refused")
    fake.block("gpu-1", 0)  # the budget allows it now
    clock.now = 11.0
    await k8s.cordon("gpu-1", "r-1")
    assert await k8s.drain_state("gpu-1") is DrainState.DRAINED
    assert k8s.drain_blocker("gpu-1") is None
    assert fake.deletes == []


async def test_a_foreign_cordon_is_recognised_and_kept(
    fake: FakeKubernetes, tmp_path: Path
) -> None:
    k8s = adapter(fake, tmp_path, Clock())
    node = fake.nodes["gpu-2"]
    node.unschedulable = True
    node.annotations["ops/reason"] = "bad PSU"
    with pytest.raises(ForeignDrain, match="cordoned by someone else"):
        await k8s.cordon("gpu-2", "r-1")
    assert await k8s.drain_state("gpu-2") is DrainState.NOT_DRAINED
    assert await k8s.resume("gpu-2") is False
    assert node.unschedulable and node.annotations == {"ops/reason": "bad PSU"}
    assert await k8s.own_drains() == []  # a foreign cordon is never listed as Lockstep's
    assert fake.evictions == []


async def test_an_unreachable_api_server_is_a_transient_error(tmp_path: Path) -> None:
    async with FakeKubernetes(["gpu-1"]) as gone:
        path = gone.kubeconfig(tmp_path / "kubeconfig")
    k8s = KubernetesScheduler.from_kubeconfig(path, timeout_s=2.0)
    with pytest.raises(SchedulerUnavailable):
        await k8s.drain_state("gpu-1")
