"""Where the reaper moves an orphaned item (domain.orphans): every step, both ways a node's
firmware may have been written; the worker's reaper loop; the scheduler chosen by the
settings."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lockstep_common.service import Resources
from lockstep_redfish.image_server import ImageServer
from lockstep_updater.adapters.k8s_scheduler import KubernetesScheduler
from lockstep_updater.adapters.sim_scheduler import SimScheduler
from lockstep_updater.adapters.slurm_scheduler import SlurmScheduler
from lockstep_updater.domain.orphans import ORPHANABLE, orphan_end, written
from lockstep_updater.domain.steps import ALLOWED, NodeStep
from lockstep_updater.executor import Executor
from lockstep_updater.schedulers import SCHEDULERS, scheduler_for
from lockstep_updater.settings import Settings
from lockstep_updater.worker import UpdaterWorker

pytestmark = pytest.mark.unit
S = NodeStep
STAGED = {"gpu_vbios": {"banks": "ab", "sent": True, "staged": True}}
ONE_WAY = {"psu": {"banks": "single", "sent": True}}


@pytest.mark.parametrize(
    ("state", "progress", "end"),
    [
        (S.DRAINING, {"components": STAGED}, S.UNCORDONING),
        (S.ACTIVATING, {"components": STAGED}, S.UNCORDONING),  # staged, not yet switched in
        (S.ACTIVATING, {"components": STAGED, "activate_sent": True}, S.QUARANTINED),
        (S.ACTIVATING, {"components": ONE_WAY}, S.QUARANTINED),  # written in place
        (S.UNCORDONING, {"ending": "done"}, S.UNCORDONING),
    ],
)
def test_a_drain_is_given_back_unless_the_firmware_may_have_changed(
    state: NodeStep, progress: dict[str, Any], end: NodeStep
) -> None:
    assert orphan_end(state, progress) is end
    assert end in ALLOWED[state]  # a move the step machine allows


@pytest.mark.parametrize("state", sorted(set(NodeStep) - ORPHANABLE))
def test_steps_without_a_cordon_are_not_reaped(state: NodeStep) -> None:
    with pytest.raises(ValueError, match="holds no drain"):
        orphan_end(state, {})


def test_nothing_sent_means_nothing_written() -> None:
    assert not written({})
    assert not written({"components": {"psu": {"banks": "single", "sent": False}}})


def test_the_setting_names_the_scheduler_adapter(tmp_path: Path) -> None:
    assert set(SCHEDULERS) == {"sim", "slurm", "kubernetes"}
    sim = scheduler_for(Settings(scheduler="sim", scheduler_url="http://127.0.0.1:9"))
    assert isinstance(sim, SimScheduler) and sim.base_url == "http://127.0.0.1:9"
    slurm = scheduler_for(
        Settings(scheduler="slurm", slurm_scontrol="/opt/slurm/bin/scontrol", slurm_timeout_s=3)
    )
    assert isinstance(slurm, SlurmScheduler)
    assert (slurm.scontrol, slurm.timeout_s) == ("/opt/slurm/bin/scontrol", 3)
    kube = tmp_path / "kubeconfig"
    kube.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    k8s = scheduler_for(Settings(scheduler="kubernetes", kubeconfig=kube, kube_evict_backoff_s=2))
    assert isinstance(k8s, KubernetesScheduler) and k8s.backoff_s == 2


def test_an_unknown_scheduler_kind_is_refused_by_the_settings() -> None:
    with pytest.raises(ValueError, match="'sim', 'slurm' or 'kubernetes'"):
        Settings(scheduler="pbs")  # type: ignore[arg-type]


class CountingExecutor:
    """Stands in for the executor: counts reaper passes and stops the worker after two."""

    def __init__(self, stopping: asyncio.Event) -> None:
        self.stopping = stopping
        self.ttls: list[float] = []
        self.swept = 0

    async def reap(self, ttl_s: float) -> int:
        self.ttls.append(ttl_s)
        if len(self.ttls) == 2:
            self.stopping.set()
        if len(self.ttls) == 1:
            raise OSError("scheduler away")  # one failed pass does not end the reaper
        return 0

    async def give_back_strays(self) -> list[str]:
        self.swept += 1
        return []


def unbuilt(resources: Resources, server: ImageServer | None) -> Executor:
    """The worker's executor factory, never called: the test hands its loop an executor."""
    raise AssertionError("the executor is the test's")


async def test_the_worker_reaps_every_interval_with_the_configured_ttl_until_stopped() -> None:
    settings = Settings(orphan_ttl_s=1234, reap_interval_s=0.01)
    worker = UpdaterWorker(settings, unbuilt)
    stopping = asyncio.Event()
    executor = CountingExecutor(stopping)
    await asyncio.wait_for(worker._reaper(executor, stopping), timeout=10)  # type: ignore[arg-type]
    assert executor.ttls == [1234, 1234]
    assert executor.swept == 1  # the pass whose reap raised swept nothing; the next one did
