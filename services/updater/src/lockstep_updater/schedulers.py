"""Which ``Scheduler`` the updater drains nodes with: one row per ``settings.scheduler`` kind,
each building its adapter from the settings."""

from __future__ import annotations

from collections.abc import Callable

from lockstep_updater.adapters.k8s_scheduler import KubernetesScheduler
from lockstep_updater.adapters.sim_scheduler import SimScheduler
from lockstep_updater.adapters.slurm_scheduler import SlurmScheduler
from lockstep_updater.ports import Scheduler
from lockstep_updater.settings import Settings

SCHEDULERS: dict[str, Callable[[Settings], Scheduler]] = {
    "sim": lambda s: SimScheduler(s.scheduler_url),
    "slurm": lambda s: SlurmScheduler(
        scontrol=s.slurm_scontrol, conf=s.slurm_conf, timeout_s=s.slurm_timeout_s
    ),
    "kubernetes": lambda s: KubernetesScheduler.from_kubeconfig(
        s.kubeconfig, backoff_s=s.kube_evict_backoff_s, backoff_max_s=s.kube_evict_backoff_max_s
    ),
}


def scheduler_for(settings: Settings) -> Scheduler:
    """The adapter ``settings.scheduler`` names (the settings' ``Literal`` keeps it a key)."""
    return SCHEDULERS[settings.scheduler](settings)
