"""The ``NodeAgent`` port on a node agent's HTTP channel (the simulator's
``lockstep_sim.agents.http``: ``GET /agents/{node}``, ``POST .../install-driver``,
``.../rebuild-dkms``, ``.../reboot``).

Authenticated like a BMC (design.md non-negotiable 8): the account is resolved just in time,
per call, from a registry reference (``env:PREFIX`` -> ``PREFIX_USERNAME``/``PREFIX_PASSWORD``,
or ``file:/path``), sent only in the ``Authorization`` header, never logged, stored or put in an
error. 401/403, 404 and 409 are refusals (``AgentRefused``: not retried); 5xx, 429 and a
connection that cannot be made are "not now" (``AgentUnavailable``); a call sent without an
answer (timeout, dropped connection) may have been taken (``AgentOutcomeUnknown``).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import aiohttp

from lockstep_redfish.credentials import RegistryCredentials
from lockstep_updater.domain.inband import AgentState
from lockstep_updater.ports import AgentOrder, AgentOutcomeUnknown, AgentRefused, AgentUnavailable


class HttpNodeAgent:
    """``NodeAgent`` over HTTP at ``base_url``, with the account ``credentials`` refers to."""

    def __init__(
        self,
        base_url: str,
        credentials: str,
        *,
        environ: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._reference = credentials
        self._environ = environ
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    def _authorization(self, node_id: str) -> str:
        # A fresh resolver per call: a rotated file or variable is read on the next call.
        user, password = RegistryCredentials({node_id: self._reference}, self._environ).get(node_id)
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    async def _call(
        self, method: str, node_id: str, action: str = "", body: dict[str, Any] | None = None
    ) -> AgentState:
        url = f"{self.base_url}/agents/{node_id}{'/' + action if action else ''}"
        headers = {"Authorization": self._authorization(node_id)}
        try:
            async with (
                aiohttp.ClientSession(timeout=self._timeout) as http,
                http.request(method, url, json=body, headers=headers) as reply,
            ):
                data = await reply.json(content_type=None)
        except (aiohttp.ClientConnectorError, ValueError) as exc:
            raise AgentUnavailable(f"{method} {url}: {exc}") from None  # never reached it
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AgentOutcomeUnknown(f"{method} {url}: no answer: {exc}") from None
        if reply.status == 429 or reply.status >= 500:
            raise AgentUnavailable(f"{method} {url}: HTTP {reply.status}")
        error = data.get("error") if isinstance(data, dict) else None
        if reply.status in {401, 403}:
            raise AgentRefused(f"node agent of {node_id} refused the credentials ({reply.status})")
        if reply.status != 200 or not isinstance(data, dict):
            raise AgentRefused(
                f"node agent of {node_id}: {action or 'read'}: HTTP {reply.status}: {error}"
            )
        return parse_state(node_id, data)

    # The simulator's HTTP channel takes no fence nor digest: only the node id of the order.
    async def state(self, order: AgentOrder) -> AgentState:
        return await self._call("GET", order.node_id)

    async def install_driver(self, order: AgentOrder, version: str) -> AgentState:
        return await self._call("POST", order.node_id, "install-driver", {"version": version})

    async def rebuild_dkms(self, order: AgentOrder) -> AgentState:
        return await self._call("POST", order.node_id, "rebuild-dkms")

    async def reboot(self, order: AgentOrder) -> AgentState:
        return await self._call("POST", order.node_id, "reboot")


def parse_state(node_id: str, data: Mapping[str, Any]) -> AgentState:
    """The agent's answer as an ``AgentState``; ``AgentRefused`` naming the field when it is
    malformed (nothing is decided from a reading that cannot be trusted)."""

    def text(name: str, *, optional: bool = False) -> Any:
        value = data.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise AgentRefused(f"node agent of {node_id}: {name} is not a string")
        return value

    dirs = data.get("firmware_dirs")
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise AgentRefused(f"node agent of {node_id}: firmware_dirs is not a list of versions")
    return AgentState(
        phase=text("phase"),
        driver=text("driver"),
        loaded_module=text("loaded_module", optional=True),
        gsp_firmware=text("gsp_firmware", optional=True),
        firmware_dirs=tuple(dirs),
        dkms=text("dkms"),
        cuda=text("cuda"),
        nccl=text("nccl"),
        fabric_manager=text("fabric_manager", optional=True),
        module_rejected=data.get("module_rejected") is True,
        diag_passed=data.get("diag_passed") is True,
    )
