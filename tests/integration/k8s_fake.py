"""A FAKE Kubernetes API server, for tests only: it stands in for a real one because no
Kubernetes API server can run on this machine (no kubelet, no etcd, no container runtime).

It is hand-written (aiohttp, loopback) and serves only the few endpoints the updater's
Kubernetes adapter (``lockstep_updater.adapters.k8s_scheduler``) calls through the official
``kubernetes`` client, with the semantics of the real API that the adapter relies on:

- ``GET /api/v1/nodes/{name}`` and ``PATCH`` of it as a JSON merge patch (RFC 7386), refused with
  409 when the patch names a ``resourceVersion`` that is no longer current;
- ``GET /api/v1/pods?fieldSelector=spec.nodeName=NODE``;
- ``POST /api/v1/namespaces/{ns}/pods/{name}/eviction`` (policy/v1 Eviction): 429 while a
  PodDisruptionBudget blocks the pod's node (``block``), else the pod is gone and 201;
- any ``DELETE`` is recorded in ``deletes`` and refused: the adapter must never delete a pod.

Everything it was asked is kept (``evictions``, ``cordons``) for tests to judge. It does not
schedule, watch, authenticate or validate beyond that; a real cluster may differ in ways this
fake cannot show.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

HOST = "127.0.0.1"
PDB_REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget."


@dataclass
class FakeNode:
    name: str
    unschedulable: bool = False
    annotations: dict[str, str] = field(default_factory=dict)
    version: int = 1


@dataclass
class FakePod:
    namespace: str
    name: str
    node: str
    daemonset: bool = False


@dataclass(frozen=True)
class Eviction:
    at: float  # time.monotonic()
    namespace: str
    name: str
    node: str
    status: int
    body: dict[str, Any]


class FakeKubernetes:
    """``async with FakeKubernetes(["node-1", ...]) as k8s: k8s.kubeconfig(path)``: every node
    runs one training pod (``ml/train-NODE``) and one DaemonSet pod (``kube-system/dcgm-NODE``,
    which a drain leaves alone)."""

    def __init__(self, nodes: list[str]) -> None:
        self.nodes = {n: FakeNode(n) for n in nodes}
        self.pods: dict[tuple[str, str], FakePod] = {}
        for n in nodes:
            self.pods["ml", f"train-{n}"] = FakePod("ml", f"train-{n}", n)
            self.pods["kube-system", f"dcgm-{n}"] = FakePod(
                "kube-system", f"dcgm-{n}", n, daemonset=True
            )
        self.blocked_until: dict[str, float] = {}
        self.evictions: list[Eviction] = []
        self.cordons: list[tuple[float, str, bool]] = []  # (monotonic, node, cordoned)
        self.deletes: list[str] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    def block(self, node: str, seconds: float = math.inf) -> None:
        """A PodDisruptionBudget refuses evictions of the node's pods for ``seconds`` from now."""
        self.blocked_until[node] = time.monotonic() + seconds

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
            f"clusters:\n- name: fake\n  cluster:\n    server: {self.url}\n"
            "users:\n- name: fake\n  user:\n    token: fake-token\n"
            "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n"
        )
        return path

    async def __aenter__(self) -> FakeKubernetes:
        app = web.Application()
        app.router.add_get("/api/v1/nodes", self._list_nodes)
        app.router.add_get("/api/v1/nodes/{name}", self._get_node)
        app.router.add_patch("/api/v1/nodes/{name}", self._patch_node)
        app.router.add_get("/api/v1/pods", self._list_pods)
        app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/eviction", self._evict)
        app.router.add_route("DELETE", "/{tail:.*}", self._delete)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- what a test reads ---------------------------------------------------------------------

    def out_of_service(self, at: float) -> set[str]:
        """Nodes cordoned at monotonic time ``at``, from the recorded cordons."""
        state = {node: cordoned for when, node, cordoned in self.cordons if when <= at}
        return {n for n, c in state.items() if c}

    # -- the API -------------------------------------------------------------------------------

    def _node_json(self, node: FakeNode) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node.name,
                "resourceVersion": str(node.version),
                "annotations": dict(node.annotations),
            },
            "spec": {"unschedulable": node.unschedulable},
        }

    async def _list_nodes(self, request: web.Request) -> web.Response:
        items = [self._node_json(n) for n in self.nodes.values()]
        return web.json_response({"apiVersion": "v1", "kind": "NodeList", "items": items})

    async def _get_node(self, request: web.Request) -> web.Response:
        node = self.nodes.get(request.match_info["name"])
        if node is None:
            return _status(404, "NotFound", "node not found")
        return web.json_response(self._node_json(node))

    async def _patch_node(self, request: web.Request) -> web.Response:
        node = self.nodes.get(request.match_info["name"])
        if node is None:
            return _status(404, "NotFound", "node not found")
        if request.content_type != "application/merge-patch+json":
            return _status(415, "UnsupportedMediaType", request.content_type)
        patch = await request.json()
        meta = patch.get("metadata") or {}
        wanted = meta.get("resourceVersion")
        if wanted is not None and wanted != str(node.version):
            return _status(409, "Conflict", "the object has been modified")
        for key, value in (meta.get("annotations") or {}).items():
            if value is None:
                node.annotations.pop(key, None)
            else:
                node.annotations[key] = value
        spec = patch.get("spec") or {}
        if "unschedulable" in spec:
            cordoned = bool(spec["unschedulable"])
            if cordoned != node.unschedulable:
                self.cordons.append((time.monotonic(), node.name, cordoned))
            node.unschedulable = cordoned
        node.version += 1
        return web.json_response(self._node_json(node))

    async def _list_pods(self, request: web.Request) -> web.Response:
        selector = request.query.get("fieldSelector", "")
        _, _, node = selector.partition("spec.nodeName=")
        items = [_pod_json(p) for p in self.pods.values() if not node or p.node == node]
        return web.json_response(
            {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}
        )

    async def _evict(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        body = await request.json()
        pod = self.pods.get(key)
        if pod is None:
            return _status(404, "NotFound", "pod not found")
        now = time.monotonic()
        status = 429 if now < self.blocked_until.get(pod.node, 0.0) else 201
        self.evictions.append(Eviction(now, key[0], key[1], pod.node, status, body))
        if status == 429:
            return _status(429, "TooManyRequests", PDB_REFUSAL)
        del self.pods[key]
        return _status(201, "", "", success=True)

    async def _delete(self, request: web.Request) -> web.Response:
        self.deletes.append(request.path)
        return _status(405, "MethodNotAllowed", "this fake refuses every DELETE")


def _pod_json(pod: FakePod) -> dict[str, Any]:
    owners = (
        [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dcgm", "uid": "ds-1"}]
        if pod.daemonset
        else [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train", "uid": "rs-1"}]
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "ownerReferences": owners},
        "spec": {"nodeName": pod.node, "containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }


def _status(code: int, reason: str, message: str, *, success: bool = False) -> web.Response:
    return web.json_response(
        {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Success" if success else "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        },
        status=code,
    )
