"""The ``Scheduler`` port on a Kubernetes API server, with the official ``kubernetes`` client.

A Lockstep node id is the Kubernetes node's name. The four calls, as ``kubectl drain`` does
them but without its ``--force`` and ``--disable-eviction``:

- ``cordon``: a JSON merge patch of the node, ``spec.unschedulable: true`` with the annotations
  ``lockstep.dev/cordoned-by: lockstep-updater`` and ``lockstep.dev/cordon-reason``; the patch
  carries the node's ``resourceVersion``, so a cordon someone made meanwhile is a conflict, not
  overwritten. A node cordoned without that annotation is someone else's (``ForeignDrain``).
  Every call after the cordon goes on evicting the node's pods (the executor calls it on every
  drain poll).
- Eviction: one ``policy/v1`` Eviction per pod (``POST .../pods/NAME/eviction``), the API that
  honours PodDisruptionBudgets. 429 means a budget blocks it now: the pod is tried again after a
  backoff that doubles per refusal up to a cap. Never a pod DELETE, never a zero grace period:
  a pod that cannot be evicted keeps the node draining until the executor's drain deadline
  skips the node (``drain_blocker`` says why: ``pdb``).
- ``drain_state``: drained once no evictable pod is left on the node (DaemonSet pods, mirror
  pods and pods that already ended do not count, as in ``kubectl drain``).
- ``resume``: uncordons and removes the annotations, only when Lockstep cordoned the node.
- ``own_drains``: the nodes cordoned with Lockstep's annotation (one list of the nodes).

The client is synchronous (urllib3); each call runs in a worker thread. 5xx, timeouts and
connection errors are ``TransientError``: the executor retries the step later.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from lockstep_common.backoff import Backoff
from lockstep_updater.ports import OWNER, DrainState, ForeignDrain, SchedulerUnavailable

CORDONED_BY = "lockstep.dev/cordoned-by"
CORDON_REASON = "lockstep.dev/cordon-reason"
MERGE_PATCH = "application/merge-patch+json"
MIRROR = "kubernetes.io/config.mirror"
ENDED = frozenset({"Succeeded", "Failed"})
PDB = "pdb"
T = TypeVar("T")


@dataclass(slots=True)
class _Backoff:
    """Evictions of one node refused by a PodDisruptionBudget: when to try again, and why."""

    delay_s: float
    next_at: float
    refusals: int
    last: str


class KubernetesScheduler:
    """``Scheduler`` over a Kubernetes API server (``client.CoreV1Api``)."""

    def __init__(
        self,
        api: client.CoreV1Api,
        *,
        backoff_s: float = 1.0,
        backoff_max_s: float = 60.0,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.timeout_s = timeout_s
        self.clock = clock
        self._blocked: dict[str, _Backoff] = {}

    @classmethod
    def from_kubeconfig(cls, path: Path | None, **kwargs: Any) -> KubernetesScheduler:
        """From a kubeconfig file, or the pod's service account when ``path`` is None."""
        if path is None:
            configuration = client.Configuration()
            # The config loaders are not annotated (the generated client is).
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            api_client = client.ApiClient(configuration)
        else:
            api_client = config.new_client_from_config(config_file=str(path))  # type: ignore[no-untyped-call]
        return cls(client.CoreV1Api(api_client), **kwargs)

    async def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return await asyncio.to_thread(fn, *args, _request_timeout=self.timeout_s, **kwargs)
        except ApiException as exc:
            if exc.status is not None and (exc.status >= 500 or exc.status == 429):
                raise SchedulerUnavailable(f"{what}: HTTP {exc.status} {exc.reason}") from None
            raise
        except (HTTPError, OSError) as exc:
            raise SchedulerUnavailable(f"{what}: {exc}") from None

    async def _node(self, node_id: str) -> tuple[bool, str | None, str | None]:
        """(cordoned, who cordoned it per our annotation, resourceVersion)."""
        node = await self._call(f"node {node_id}", self.api.read_node, node_id)
        annotations = (node.metadata.annotations if node.metadata else None) or {}
        cordoned = bool(node.spec and node.spec.unschedulable)
        version = node.metadata.resource_version if node.metadata else None
        return cordoned, annotations.get(CORDONED_BY), version

    async def cordon(self, node_id: str, reason: str) -> None:
        cordoned, by, version = await self._node(node_id)
        if cordoned and by != OWNER:
            raise ForeignDrain(f"{node_id} is cordoned by someone else ({by or 'unannotated'})")
        if not cordoned:
            patch = {
                "metadata": {
                    "resourceVersion": version,
                    "annotations": {CORDONED_BY: OWNER, CORDON_REASON: reason},
                },
                "spec": {"unschedulable": True},
            }
            try:
                await self._call(
                    f"cordon {node_id}",
                    self.api.patch_node,
                    node_id,
                    patch,
                    _content_type=MERGE_PATCH,
                )
            except ApiException as exc:
                if exc.status == 409:  # changed meanwhile: read it again on the next poll
                    raise SchedulerUnavailable(f"cordon {node_id}: conflict") from None
                raise SchedulerUnavailable(f"cordon {node_id}: HTTP {exc.status}") from None
        await self._evict(node_id)

    async def _evictable(self, node_id: str) -> list[tuple[str, str]]:
        pods = await self._call(
            f"pods on {node_id}",
            self.api.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={node_id}",
        )
        found = []
        for pod in pods.items:
            meta = pod.metadata
            if meta is None or meta.name is None:
                continue
            if pod.status is not None and pod.status.phase in ENDED:
                continue
            if MIRROR in (meta.annotations or {}):
                continue  # a static pod: the kubelet owns it, the API cannot evict it
            if any(o.kind == "DaemonSet" for o in meta.owner_references or ()):
                continue  # recreated on the node at once: kubectl drain leaves them too
            found.append((meta.namespace or "default", meta.name))
        return found

    async def _evict(self, node_id: str) -> None:
        """One Eviction per pod left, unless a budget refused the last try too recently."""
        blocked = self._blocked.get(node_id)
        now = self.clock()
        if blocked is not None and now < blocked.next_at:
            return
        refused: str | None = None
        for namespace, name in await self._evictable(node_id):
            body = client.V1Eviction(
                api_version="policy/v1",
                kind="Eviction",
                metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            )
            try:
                await asyncio.to_thread(
                    self.api.create_namespaced_pod_eviction,
                    name,
                    namespace,
                    body,
                    _request_timeout=self.timeout_s,
                )
            except ApiException as exc:
                if exc.status == 429:
                    refused = f"eviction of {namespace}/{name} refused: {exc.reason or 429}"
                elif exc.status == 404:
                    continue  # gone already
                else:  # 5xx, or a refusal the next try may not meet (403 until RBAC is fixed)
                    raise SchedulerUnavailable(
                        f"evict {namespace}/{name}: HTTP {exc.status} {exc.reason}"
                    ) from None
            except (HTTPError, OSError) as exc:
                raise SchedulerUnavailable(f"evict {namespace}/{name}: {exc}") from None
        if refused is None:
            self._blocked.pop(node_id, None)
            return
        # Doubling backoff per refusal, capped (as kubectl drain retries a 429 every 5 s).
        refusals = 1 if blocked is None else blocked.refusals + 1
        delay = Backoff(self.backoff_s, self.backoff_max_s).delay(refusals - 1)
        self._blocked[node_id] = _Backoff(delay, now + delay, refusals, refused)

    async def drain_state(self, node_id: str) -> DrainState:
        cordoned, by, _ = await self._node(node_id)
        if not cordoned or by != OWNER:
            return DrainState.NOT_DRAINED
        if await self._evictable(node_id):
            return DrainState.DRAINING
        return DrainState.DRAINED

    def drain_blocker(self, node_id: str) -> str | None:
        """Why the node is not drained yet, when a PodDisruptionBudget refused its evictions."""
        blocked = self._blocked.get(node_id)
        if blocked is None:
            return None
        return f"{PDB}: {blocked.last} (a PodDisruptionBudget; {blocked.refusals} tries)"

    async def own_drains(self) -> list[str]:
        """Every node cordoned with Lockstep's annotation (one list of the nodes)."""
        nodes = await self._call("nodes", self.api.list_node)
        return [
            node.metadata.name
            for node in nodes.items
            if node.metadata
            and node.metadata.name
            and node.spec
            and node.spec.unschedulable
            and (node.metadata.annotations or {}).get(CORDONED_BY) == OWNER
        ]

    async def resume(self, node_id: str) -> bool:
        _, by, version = await self._node(node_id)
        self._blocked.pop(node_id, None)
        if by != OWNER:
            return False  # nothing of ours: a foreign cordon keeps its owner
        patch = {
            "metadata": {
                "resourceVersion": version,
                "annotations": {CORDONED_BY: None, CORDON_REASON: None},
            },
            "spec": {"unschedulable": None},
        }
        try:
            await self._call(
                f"uncordon {node_id}",
                self.api.patch_node,
                node_id,
                patch,
                _content_type=MERGE_PATCH,
            )
        except ApiException as exc:
            raise SchedulerUnavailable(f"uncordon {node_id}: HTTP {exc.status}") from None
        return True
