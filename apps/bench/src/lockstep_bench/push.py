"""``lockstep bench update`` (b): image push throughput to many BMCs, ``lockstep_redfish`` against
a raw multipart client, on the same simulator in the same run.

The simulated BMCs run in a child process, as in ``bench_sweep`` (perf.md section 5), so that
the BMCs' work (reading the multipart body, hashing and planning the image) is not charged to
the client being measured: real BMCs are other machines. Each round pushes one image to every
BMC at once, once through ``FirmwareUpdate.push`` (the executor's call: the image carries the
manifest's SHA-384, as the executor builds it, and is checked against it right before it is
sent; its bytes were hashed once, before the rounds, as the executor's step hashes them once
when it reads the bundle (``FirmwareImage.actual``); the multipart body goes out as headers, the
image's own bytes, closing boundary; the reply is parsed into a task) and once through
``aiohttp`` directly (one ``FormData`` POST with the session token, the reply read); which goes
first alternates between rounds, so neither always meets a warmer server. Sessions are opened
and the preflight is made once per BMC before the rounds: both sides time only the push.
Throughput is the image bytes delivered over the round's wall time; ``push_ratio`` is the median
of the library's rounds over the median of the raw client's (goal >= 0.8).

The child is started with multiprocessing's ``spawn``: a script calling ``run_push`` needs the
usual ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import multiprocessing
import statistics
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import aiohttp

from lockstep_redfish import BmcTarget, RedfishClient, RetryPolicy
from lockstep_redfish.image import FirmwareImage
from lockstep_redfish.preflight import Preflight, UpdateRequest
from lockstep_redfish.profile import BmcProfile, profile_named
from lockstep_redfish.session import BmcSession
from lockstep_redfish.update import FirmwareUpdate, UpdatePolicy
from lockstep_sim.options import SimOptions
from lockstep_sim.simulator import Simulator

FIRMWARE = "/redfish/v1/UpdateService/FirmwareInventory"
SESSIONS = "/redfish/v1/SessionService/Sessions"
READY_TIMEOUT_S = 120.0


def profile_for_dialect(dialect: str) -> BmcProfile:
    """The BMC profile built for the simulator's ``dialect`` (the same name; the simulator's
    own ``lockstep`` dialect is ``lockstep-sim``)."""
    return profile_named("lockstep-sim" if dialect == "lockstep" else dialect)


def _serve(conn: Connection, nodes: int, host: str, dialect: str) -> None:
    """Child-process entry point: serve ``nodes`` BMCs until the parent says stop (or goes)."""

    async def serve() -> None:
        # A fast clock: the update each push starts ends in milliseconds, not minutes.
        options = SimOptions(
            nodes, "gb200", dialect=dialect, time_scale=0.0005, host_base=host, port=0
        )
        sim = Simulator(options)
        await sim.start()
        try:
            conn.send([(node.id, sim.bmc_url(node.id)) for node in sim.fleet])
            await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        finally:
            await sim.stop()

    with contextlib.suppress(EOFError, KeyboardInterrupt):
        asyncio.run(serve())


@contextlib.contextmanager
def _child_fleet(nodes: int, host: str, dialect: str) -> Iterator[list[tuple[str, str]]]:
    """(node id, BMC URL) of every BMC of a simulator running in a child process."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(child, nodes, host, dialect), daemon=True)
    proc.start()
    try:
        if not parent.poll(READY_TIMEOUT_S):
            raise RuntimeError(f"simulator did not start in {READY_TIMEOUT_S:g}s")
        yield parent.recv()
        parent.send("stop")
    finally:
        parent.close()  # a child still waiting sees EOF and exits
        proc.join(timeout=30)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)


class _Fixed:
    """``CredentialSource``: the same account on every BMC."""

    def __init__(self, username: str, password: str) -> None:
        self.pair = (username, password)

    def get(self, node_id: str) -> tuple[str, str]:
        return self.pair


async def _raw_login(http: aiohttp.ClientSession, url: str, user: str, password: str) -> str:
    async with http.post(
        f"{url}{SESSIONS}", json={"UserName": user, "Password": password}
    ) as reply:
        reply.raise_for_status()
        return reply.headers["X-Auth-Token"]


async def _raw_push(
    http: aiohttp.ClientSession, url: str, token: str, image: FirmwareImage, request: UpdateRequest
) -> None:
    # As the dialect's profile pushes: Stage where it stages, else its apply time.
    when = {"Stage": True} if request.stage else {"@Redfish.OperationApplyTime": request.apply_time}
    form = aiohttp.FormData()
    form.add_field(
        "UpdateParameters",
        json.dumps({"Targets": list(request.targets), **when}),
        content_type="application/json",
    )
    form.add_field(
        "UpdateFile", image.data, filename=image.filename, content_type="application/octet-stream"
    )
    async with http.post(url, data=form, headers={"X-Auth-Token": token}) as reply:
        await reply.read()
        if reply.status != 202:
            raise RuntimeError(f"raw push answered {reply.status}")


async def _rounds(
    bmcs: list[tuple[str, str]],
    image: FirmwareImage,
    request: UpdateRequest,
    account: tuple[str, str],
    rounds: int,
) -> dict[str, list[float]]:
    client = RedfishClient(_Fixed(*account), RetryPolicy(timeout_s=60, retries=0))
    sessions: list[BmcSession] = []
    raw = aiohttp.ClientSession()
    try:
        updates: list[tuple[FirmwareUpdate, Preflight]] = []
        raw_targets: list[tuple[str, str]] = []
        for node_id, url in bmcs:
            bmc = client.session(BmcTarget(node_id, url, allow_plain_http=True))
            sessions.append(bmc)
            await bmc.open()
            update = FirmwareUpdate(bmc, UpdatePolicy())
            plan = await update.preflight(image, request)
            updates.append((update, plan))
            raw_targets.append((f"{url}{plan.uri}", await _raw_login(raw, url, *account)))

        async def library() -> None:
            await asyncio.gather(*(u.push(image, request, p) for u, p in updates))

        async def direct() -> None:
            await asyncio.gather(*(_raw_push(raw, u, t, image, request) for u, t in raw_targets))

        figures: dict[str, list[float]] = {"library": [], "raw": []}
        moved_mb = len(image.data) * len(bmcs) / 1e6
        for number in range(rounds):
            order = [("library", library), ("raw", direct)]
            for name, push in order if number % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                await push()
                figures[name].append(round(moved_mb / (time.perf_counter() - started), 2))
        return figures
    finally:
        await raw.close()
        for bmc in sessions:
            await bmc.close()  # never raises for a failed logout


async def run_push(
    nodes: int,
    image_bytes: bytes,
    version: str,
    members: tuple[str, ...],
    *,
    rounds: int,
    account: tuple[str, str],
    host: str,
    dialect: str = "lockstep",
) -> dict[str, Any]:
    """The push figures: medians of ``rounds`` rounds per client, with every round's MB/s;
    pushed to BMCs speaking ``dialect`` as its profile says (``profile_for_dialect``)."""
    # As the executor builds it: the manifest's SHA-384, checked against before every push
    # (its bytes hashed once, by the preflight before the rounds, as the executor's step does).
    image = FirmwareImage(image_bytes, hashlib.sha384(image_bytes).hexdigest(), "gpu.fwpkg")
    profile = profile_for_dialect(dialect)
    targets = tuple(f"{FIRMWARE}/{m}" for m in members)
    if profile.activation.stage_and_activate:
        request = UpdateRequest(targets, version, stage=True)
    else:
        request = UpdateRequest(targets, version, apply_time=profile.activation.apply_time)
    with _child_fleet(nodes, host, dialect) as bmcs:
        figures = await _rounds(bmcs, image, request, account, rounds)
    library_mb_s = statistics.median(figures["library"])
    raw_mb_s = statistics.median(figures["raw"])
    return {
        "push_ratio": round(library_mb_s / raw_mb_s, 3),
        "push_library_mb_s": library_mb_s,
        "push_raw_mb_s": raw_mb_s,
        "push_rounds": figures,
        "push_image_bytes": len(image_bytes),
    }
