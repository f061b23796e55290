"""``lockstep bench update`` (b): image push throughput to many BMCs, ``lockstep_redfish``
against a raw multipart client, on the same simulator in the same run.

Each round pushes one image to every BMC at once, first (or second: the order alternates
between rounds, so neither client always meets a warmer simulator) through
``FirmwareUpdate.push`` (the executor's call: the multipart body built once, the image
re-hashed right before it is sent, the reply parsed into a task), then through ``aiohttp``
directly (one ``FormData`` POST with the session token, the reply read). Sessions are opened
before the rounds and the preflight is made once per BMC: both sides time only the push.
Throughput is image bytes delivered over the round's wall time; ``push_ratio`` is the median
of the library's rounds over the median of the raw client's (goal >= 0.8).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import statistics
import time
from typing import Any

import aiohttp

from lockstep_redfish import BmcTarget, RedfishClient, RetryPolicy
from lockstep_redfish.image import FirmwareImage
from lockstep_redfish.preflight import Preflight, UpdateRequest
from lockstep_redfish.session import BmcSession
from lockstep_redfish.update import FirmwareUpdate, UpdatePolicy
from lockstep_sim.options import SimOptions
from lockstep_sim.runtime import FleetRuntime
from lockstep_updater.adapters.credentials import FleetCredentials
from lockstep_updater.testing.sim_fleet import SimFacts

FIRMWARE = "/redfish/v1/UpdateService/FirmwareInventory"
SESSIONS = "/redfish/v1/SessionService/Sessions"


async def _raw_login(http: aiohttp.ClientSession, url: str, user: str, password: str) -> str:
    async with http.post(
        f"{url}{SESSIONS}", json={"UserName": user, "Password": password}
    ) as reply:
        reply.raise_for_status()
        return reply.headers["X-Auth-Token"]


async def _raw_push(
    http: aiohttp.ClientSession, url: str, token: str, image: FirmwareImage, targets: list[str]
) -> None:
    form = aiohttp.FormData()
    form.add_field(
        "UpdateParameters",
        json.dumps({"Targets": targets, "Stage": True}),
        content_type="application/json",
    )
    form.add_field(
        "UpdateFile", image.data, filename=image.filename, content_type="application/octet-stream"
    )
    async with http.post(url, data=form, headers={"X-Auth-Token": token}) as reply:
        await reply.read()
        if reply.status != 202:
            raise RuntimeError(f"raw push answered {reply.status}")


async def run_push(
    nodes: int,
    image_bytes: bytes,
    version: str,
    gpu_ids: tuple[str, ...],
    *,
    rounds: int,
    environ: dict[str, str],
    credentials: str,
    host: str,
) -> dict[str, Any]:
    """The push figures: medians of ``rounds`` rounds per client, with every round's MB/s."""
    rt = FleetRuntime(
        SimOptions(nodes, "gb200", time_scale=0.0005, host_base=host, port=0), scheduler_port=0
    )
    await rt.start()
    image = FirmwareImage(image_bytes, hashlib.sha256(image_bytes).hexdigest(), "gpu.fwpkg")
    targets = tuple(f"{FIRMWARE}/{m}" for m in gpu_ids)
    request = UpdateRequest(targets, version, stage=True)
    facts = SimFacts(rt, credentials=credentials)
    fleet_credentials = FleetCredentials(environ)
    client = RedfishClient(fleet_credentials, RetryPolicy(timeout_s=30, retries=0))
    user, password = environ[f"{credentials}_USERNAME"], environ[f"{credentials}_PASSWORD"]
    sessions: list[BmcSession] = []
    raw = aiohttp.ClientSession()
    try:
        updates: list[tuple[FirmwareUpdate, Preflight]] = []
        raw_targets: list[tuple[str, str]] = []
        for node in facts.nodes.values():
            fleet_credentials.learn(node)
            bmc = client.session(BmcTarget(node.node_id, node.bmc_url, allow_plain_http=True))
            await bmc.open()
            sessions.append(bmc)
            update = FirmwareUpdate(bmc, UpdatePolicy())
            plan = await update.preflight(image, request)
            updates.append((update, plan))
            token = await _raw_login(raw, node.bmc_url, user, password)
            raw_targets.append((f"{node.bmc_url}{plan.uri}", token))

        async def library() -> None:
            await asyncio.gather(*(u.push(image, request, p) for u, p in updates))

        async def direct() -> None:
            await asyncio.gather(
                *(_raw_push(raw, uri, token, image, list(targets)) for uri, token in raw_targets)
            )

        figures: dict[str, list[float]] = {"library": [], "raw": []}
        moved_mb = len(image_bytes) * nodes / 1e6
        for number in range(rounds):
            order = [("library", library), ("raw", direct)]
            for name, push in order if number % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                await push()
                figures[name].append(round(moved_mb / (time.perf_counter() - started), 2))
    finally:
        await raw.close()
        for bmc in sessions:
            with contextlib.suppress(Exception):  # a benchmark's cleanup: the BMCs stop next
                await bmc.close()
        await rt.stop()
    library_mb_s = statistics.median(figures["library"])
    raw_mb_s = statistics.median(figures["raw"])
    return {
        "push_ratio": round(library_mb_s / raw_mb_s, 3),
        "push_library_mb_s": library_mb_s,
        "push_raw_mb_s": raw_mb_s,
        "push_rounds": figures,
        "push_image_bytes": len(image_bytes),
    }
