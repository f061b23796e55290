"""The sweeper against the real NVIDIA captures (tests/data/reference/redfish-mockups), served as
they were recorded: every member read, every version exact, the mapping as the unit tests say.

The server below is a static mockup server in the style of DMTF's Redfish-Mockup-Server: it
serves each ``index.json`` by path, and adds only what a recording cannot hold: a session
(``POST``/``DELETE`` on the Sessions collection, DSP0266 section 13.3) and ``$expand=.($levels=1)``
on a collection, which the captured ServiceRoot advertises (DSP0266 "Query parameters").
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from lockstep_inventory.adapters.sweeper import SweepOptions, SweepResult, sweep
from lockstep_inventory.domain.members import Member, versions_of
from lockstep_inventory.sweeping import report_of
from lockstep_redfish.profile import profile_named
from lockstep_redfish.session import BmcTarget
from tests.reference import REFERENCE

pytestmark = pytest.mark.integration
MOCKUPS = REFERENCE / "redfish-mockups"
SESSIONS = "/redfish/v1/SessionService/Sessions"
CHOSEN = {
    "nvidia_gb200": "nvidia-gb200-nvl",
    "nvidia_gbswitch": "nvidia-gb200-nvl",
    "nvidia_viking": "nvidia-hgx",
    "supermicro_hgx": "supermicro-x13",
}


class Mockup:
    """One capture behind HTTP; counts sessions so the test can see each one closed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.open_sessions: set[str] = set()
        self.created = 0

    def doc(self, path: str) -> dict[str, Any] | None:
        file = self.root / path.strip("/") / "index.json"
        return json.loads(file.read_text()) if file.is_file() else None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path == SESSIONS and request.method == "POST":
            self.created += 1
            sid = str(self.created)
            self.open_sessions.add(sid)
            return web.json_response(
                {"@odata.id": f"{SESSIONS}/{sid}", "Id": sid},
                status=201,
                headers={"X-Auth-Token": f"token-{sid}", "Location": f"{SESSIONS}/{sid}"},
            )
        if path.startswith(SESSIONS + "/") and request.method == "DELETE":
            self.open_sessions.discard(path.rsplit("/", 1)[1])
            return web.json_response({}, status=200)
        if request.method != "GET":
            return web.json_response({"error": "method not allowed"}, status=405)
        if path != "/redfish/v1" and not request.headers.get("X-Auth-Token", "").startswith(
            "token-"
        ):
            return web.json_response({"error": "unauthorized"}, status=401)
        doc = self.doc(path)
        if doc is None:
            return web.json_response({"error": f"no {path} in the capture"}, status=404)
        if "$expand" in request.query and "Members" in doc:
            doc["Members"] = [self.doc(m["@odata.id"]) or m for m in doc["Members"]]
        return web.json_response(doc)


class Credentials:
    def get(self, node_id: str) -> tuple[str, str]:
        return "root", "not-a-secret"


@pytest.fixture(params=sorted(CHOSEN))
async def mockup(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Mockup, str]]:
    served = Mockup(MOCKUPS / request.param)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", served.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield served, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def captured_members(root: Path) -> dict[str, str | None]:
    base = root / "redfish" / "v1" / "UpdateService" / "FirmwareInventory"
    out: dict[str, str | None] = {}
    for f in base.glob("*/index.json"):
        doc = json.loads(f.read_text())
        out[doc["Id"]] = doc.get("Version")
    return out


@pytest.mark.parametrize("use_expand", [None, False])
async def test_every_captured_member_is_read_exactly(
    mockup: tuple[Mockup, str], use_expand: bool | None
) -> None:
    served, url = mockup
    async with aclosing(
        sweep(
            [BmcTarget("n1", url, allow_plain_http=True)],
            credentials=Credentials(),
            options=SweepOptions(use_expand=use_expand),
        )
    ) as stream:
        results: list[SweepResult] = [r async for r in stream]
    [result] = results
    assert result.readable, result.error
    assert {m.Id: m.Version for m in result.members} == captured_members(served.root)
    if served.root.name == "nvidia_gb200":
        assert len(result.members) == 30
    assert served.created == 1 and served.open_sessions == set()  # logged out
    root = served.doc("/redfish/v1") or {}
    advertised = bool(
        root.get("ProtocolFeaturesSupported", {}).get("ExpandQuery", {}).get("Levels")
    )
    assert result.expanded is (use_expand is None and advertised)

    report = report_of(result, 1, dt.datetime.now(dt.UTC))
    # Mapped by the profile the updater chooses for the capture (test_members: the rows).
    assert result.profile == CHOSEN[served.root.name]
    base = served.root / "redfish" / "v1" / "UpdateService" / "FirmwareInventory"
    docs = [json.loads(f.read_text()) for f in base.glob("*/index.json")]
    members = [Member.from_redfish(d) for d in docs if d.get("Version")]
    expected = versions_of(members, profile_named(CHOSEN[served.root.name]))
    assert report.components == expected.versions
    assert report.conflicts == expected.conflicts
    assert set(report.members) == set(captured_members(served.root))  # unknown ones kept too
