"""The console's server on its fake source: what it refuses, what it never shows, the headers
that keep a page from loading anything else, and the login beyond loopback."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lockstep_common.events.v1 import GateShowAnswered
from lockstep_console.server import COOKIE, create_app
from lockstep_console.source import Unavailable
from lockstep_console.testing.memory_source import MemorySource
from lockstep_devstack.tls import server_tls
from tests.unit.console import scenes

pytestmark = pytest.mark.unit
Client = TestClient[web.Request, web.Application]
TOKEN = "s3cret-console-token"


async def client_of(source: MemorySource, token: str | None = None) -> Client:
    client = TestClient(TestServer(create_app(source, token_value=token)))
    await client.start_server()
    return client


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    c = await client_of(scenes.source())
    yield c
    await c.close()


@pytest.mark.parametrize(
    "path",
    [
        "/rollouts/r.1",  # a subject wildcard's separator: never a token
        "/rollouts/%3E",
        "/rollouts/r-1%20x/gate",
        "/fleet?page=two",
        "/fleet?after=node.*",
        "/rollouts?before=a>b",
        "/nodes/node.*",
        "/fleet?quarantined_after=n%20x",
        "/fleet?quarantined_after=node.*",
    ],
)
async def test_hostile_input_is_one_line_and_no_read(path: str) -> None:
    source = scenes.source()
    client = await client_of(source)
    try:
        response = await client.get(path)
        assert response.status == 400
        assert len((await response.text()).strip().splitlines()) == 1
        assert source.asked == []  # nothing was asked of any service
    finally:
        await client.close()


async def test_an_unknown_rollout_is_not_found(client: Client) -> None:
    response = await client.get("/rollouts/r-nope")
    assert response.status == 404
    assert "no rollout r-nope" in await response.text()


async def test_only_this_origin_may_load_anything_and_nothing_is_cached(client: Client) -> None:
    response = await client.get(f"/rollouts/{scenes.TRIPPED}")
    assert response.status == 200
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["Server-Timing"].startswith("app;dur=")
    html = await response.text()
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html


async def test_a_rollout_page_shows_each_stratum_with_its_canary_and_controls(
    client: Client,
) -> None:
    html = await (await client.get(f"/rollouts/{scenes.TRIPPED}")).text()
    assert "Strata, canary and control nodes" in html
    rows = html.split("<tbody>", 2)[1].split("</tbody>")[0].split("<tr>")[1:]
    assert len(rows) == len(scenes.STRATA) == 2
    assert "gb200 / acme /" in rows[0] and "<td>36</td>" in rows[0]
    assert "2: gb200-r07-n03, gb200-r11-n02</td>" in rows[0]
    assert "2: gb200-r07-n04, gb200-r12-n01</td>" in rows[0]
    # Named up to what the planner sent, counted whole: never 4,000 rows of ids.
    assert "<td>4000</td>" in rows[1]
    assert "40: h100-r00-n01, h100-r01-n01, h100-r02-n01, h100-r03-n01 and 36 more" in rows[1]
    assert "40: h100-r00-n02, h100-r01-n02, h100-r02-n02, h100-r03-n02 and 36 more" in rows[1]


async def test_the_fleet_page_lists_quarantined_nodes_a_page_at_a_time(client: Client) -> None:
    html = await (await client.get("/fleet")).text()
    section = html.split('id="held-h"')[1]
    assert f'<a href="/nodes/{scenes.QUARANTINED}">{scenes.QUARANTINED}</a>' in section
    assert "XID 79 after the flip-back: node held" in section
    assert f'href="/fleet?quarantined_after={scenes.QUARANTINED}"' in section
    html = await (await client.get(f"/fleet?quarantined_after={scenes.QUARANTINED}")).text()
    section = html.split('id="held-h"')[1]
    assert "gb200-r09-n01" in section and scenes.QUARANTINED not in section.split("<tbody>")[1]
    assert "Next quarantined nodes" not in section and 'href="/fleet">First quarantined' in section


async def test_without_the_updater_the_fleet_page_shows_the_rest_and_says_so() -> None:
    source = scenes.source()

    async def unavailable(after: str | None) -> Any:
        raise Unavailable("the updater did not answer node.quarantined")

    source.quarantined = unavailable  # type: ignore[method-assign]
    client = await client_of(source)
    try:
        response = await client.get("/fleet")
        html = await response.text()
        assert response.status == 200 and "Stragglers" in html
        assert "Quarantined nodes not shown: the updater did not answer" in html
    finally:
        await client.close()


async def test_a_rollout_planned_without_strata_says_so() -> None:
    source = scenes.source()
    state = source.rollout_states[scenes.TRIPPED]
    old = state.strata[0].model_copy(update={"size": None})
    source.rollout_states[scenes.TRIPPED] = state.model_copy(update={"strata": (old,)})
    source.rollout_states[scenes.RUNNING] = state.model_copy(update={"strata": ()})
    client = await client_of(source)
    try:
        html = await (await client.get(f"/rollouts/{scenes.TRIPPED}")).text()
        assert "<td>not recorded</td>" in html
        html = await (await client.get(f"/rollouts/{scenes.RUNNING}")).text()
        assert "The planner names no strata for this rollout." in html
    finally:
        await client.close()


async def test_a_text_from_a_service_is_escaped_not_run() -> None:
    source = scenes.source()
    state = source.rollout_states[scenes.TRIPPED]
    hostile = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    stratum = state.strata[0].model_copy(update={"supplier": hostile})
    source.rollout_states[scenes.TRIPPED] = state.model_copy(
        update={"reason": hostile, "strata": (stratum,)}
    )
    page = source.quarantined_pages[None]
    source.quarantined_pages[None] = page.model_copy(
        update={"nodes": (page.nodes[0].model_copy(update={"reason": hostile}),)}
    )
    record = source.gates[scenes.TRIPPED].verdicts[0]
    decision = {**record.decision, "reason": hostile}
    source.gates[scenes.TRIPPED] = GateShowAnswered(
        verdicts=(record.model_copy(update={"decision": decision}),)
    )
    client = await client_of(source)
    try:
        for path in (f"/rollouts/{scenes.TRIPPED}", f"/rollouts/{scenes.TRIPPED}/gate", "/fleet"):
            html = await (await client.get(path)).text()
            assert "<script>alert" not in html and "<img src=x" not in html
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    finally:
        await client.close()


async def test_every_route_but_the_login_only_reads() -> None:
    app = create_app(scenes.source())
    methods = {
        (r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None
    }
    writes = {(m, p) for m, p in methods if m not in ("GET", "HEAD")}
    assert writes == {("POST", "/login")}


async def test_with_a_token_every_page_needs_the_login() -> None:
    client = await client_of(scenes.source(), TOKEN)
    try:
        for path in ("/rollouts", "/fleet", f"/rollouts/{scenes.TRIPPED}/gate", "/static/live.js"):
            response = await client.get(path, allow_redirects=False)
            assert response.status == 303 and response.headers["Location"] == "/login"
        bad = await client.post("/login", data={"token": "guess"}, allow_redirects=False)
        assert bad.status == 401 and "guess" not in await bad.text()
        assert COOKIE not in bad.cookies
        good = await client.post("/login", data={"token": TOKEN}, allow_redirects=False)
        assert good.status == 303
        cookie = good.cookies[COOKIE]
        assert cookie.value != TOKEN and TOKEN not in cookie.value
        assert cookie["httponly"] and cookie["samesite"] == "Strict"
        assert not cookie["secure"]  # plain HTTP on loopback here: TLS sets it
        page = await client.get("/fleet", cookies={COOKIE: cookie.value})
        assert page.status == 200 and TOKEN not in await page.text()
        bearer = await client.get("/rollouts", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status == 200
        forged = await client.get("/rollouts", cookies={COOKIE: "forged"}, allow_redirects=False)
        assert forged.status == 303
    finally:
        await client.close()


async def test_an_unknown_asset_is_not_served(client: Client) -> None:
    assert (await client.get("/static/../server.py")).status == 404
    assert (await client.get("/static/nope.js")).status == 404
    js = await client.get("/static/live.js")
    assert js.status == 200 and js.content_type == "text/javascript"


async def test_a_node_page_shows_what_the_updater_did_to_it(client: Client) -> None:
    html = await (await client.get(f"/nodes/{scenes.QUARANTINED}")).text()
    assert "quarantined" in html and "XID 79 after the flip-back" in html
    assert f'href="/rollouts/{scenes.TRIPPED}"' in html
    gate = await (await client.get(f"/rollouts/{scenes.TRIPPED}/gate")).text()
    assert f'href="/nodes/{scenes.QUARANTINED}"' in gate


async def test_over_tls_the_session_cookie_is_secure(tmp_path: Path) -> None:
    tls = server_tls(tmp_path / "tls")
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(tls.cert, tls.key)
    trusted = ssl.create_default_context(cafile=str(tls.ca))
    trusted.check_hostname = False  # the stack's certificate names the stack, not "127.0.0.1"
    server = TestServer(create_app(scenes.source(), token_value=TOKEN), scheme="https")
    await server.start_server(ssl=served)
    try:
        async with aiohttp.ClientSession() as http:
            response = await http.post(
                server.make_url("/login"),
                data={"token": TOKEN},
                ssl=trusted,
                allow_redirects=False,
            )
            assert response.status == 303
            assert response.cookies[COOKIE]["secure"]
    finally:
        await server.close()


async def test_the_gate_page_draws_each_hard_rule_hit_on_a_timeline_and_lists_it() -> None:
    # Issue 32: the hard-rule hits as the healthgate recorded them (gate show's numbers as
    # given), on a timeline over the window judged, with a table saying the same in words.
    source = scenes.source()
    record = source.gates[scenes.TRIPPED].verdicts[0]
    start = record.window_start.timestamp()
    hostile = "<b>n</b>"
    rule = {
        "rule": "fatal_xid",
        "stratum": "gb200",
        "nodes": ["canary-00007", hostile],
        "canary_nodes": 10,
        "control_hits": 0,
        "control_nodes": 40,
        "environmental": False,
        "p_value": None,
        "detail": "2 of 10 canary node(s)",
        "hits": [
            {
                "node": "canary-00007",
                "at": start + 30,
                "value": 3.0,
                "threshold": 0.0,
                "detail": "XID 79 at ...",
            },
            {
                "node": hostile,
                "at": start + 60,
                "value": None,
                "threshold": 30.0,
                "detail": "no sample at all in the window",
            },
        ],
    }
    decision = {**record.decision, "rules": [rule]}
    source.gates[scenes.TRIPPED] = GateShowAnswered(
        verdicts=(record.model_copy(update={"decision": decision}),)
    )
    client = await client_of(source)
    try:
        html = await (await client.get(f"/rollouts/{scenes.TRIPPED}/gate")).text()
    finally:
        await client.close()
    figure = html[html.index('<figure id="hits-0">') :]
    figure = figure[: figure.index("</figure>")]
    when = datetime.fromtimestamp(start + 30, UTC).strftime("%H:%M:%S")
    assert f"2 on 2 node(s): canary-00007 fatal_xid at {when}" in figure  # its aria-label
    assert ">canary-00007</text>" in figure and "<circle" in figure
    assert "<b>n</b>" not in html and "&lt;b&gt;n&lt;/b&gt;" in figure
    table = html[html.index('<table class="hits">') :]
    table = table[: table.index("</table>")]
    assert '<a href="/nodes/canary-00007">canary-00007</a></td><td>fatal_xid</td>' in table
    assert '<td class="num">3</td><td class="num">0</td>' in table
    assert '<td class="num">no sample</td><td class="num">30</td>' in table


async def test_a_verdict_without_hits_draws_no_timeline(client: Client) -> None:
    html = await (await client.get(f"/rollouts/{scenes.TRIPPED}/gate")).text()
    assert "Wave 0" in html and 'id="hits-' not in html and 'class="hits"' not in html


async def test_a_hard_rule_trip_draws_the_metrics_as_of_the_trip_labelled_as_evidence(
    client: Client,
) -> None:
    # The hard rule decided, so the verdict judged no metric; the judge's comparison at the trip
    # (gate show's at_trip) is drawn as a judged gate's metrics are, under its own heading and
    # captions, and a judged gate has no such section.
    html = await (await client.get(f"/rollouts/{scenes.HARD_RULE}/gate")).text()
    section = html[html.index('<section class="at-trip" id="at-trip-0"') :]
    section = section[: section.index("</section>")]
    assert "The metrics as of the trip: evidence only, the hard rule decided" in section
    assert "did not decide it (the hard rule did)" in section
    trip = scenes.source().gates[scenes.HARD_RULE].verdicts[0].decision["at_trip"]
    compared = [m for m in trip["metrics"] if m["comparison"]]
    assert compared
    for m in compared:
        c = m["comparison"]
        label = f"{m['metric']} in {m['stratum']}: canary median"
        assert label in section and f"control median {c['control_median']:.4g}" in section
    assert section.count("over the window so far, as of the trip") == len(compared)
    assert '<h4 id="t-0-1">' in section  # under the section's h3: the outline holds
    judged = await (await client.get(f"/rollouts/{scenes.TRIPPED}/gate")).text()
    assert "at-trip" not in judged and "one value per node over the soak" in judged


async def test_a_long_halt_reason_is_cut_with_the_whole_of_it_a_click_away() -> None:
    source = scenes.source()
    state = source.rollout_states[scenes.TRIPPED]
    reason = "gate tripped on wave 0: " + "dcgm_diag_failed on node-00013; " * 20
    source.rollout_states[scenes.TRIPPED] = state.model_copy(update={"reason": reason})
    client = await client_of(source)
    try:
        html = await (await client.get(f"/rollouts/{scenes.TRIPPED}")).text()
    finally:
        await client.close()
    line = html[html.index("data-state=") :]
    line = line[: line.index("</p>")]
    assert reason not in line and line.endswith("...")
    assert f"<details><summary>The whole reason</summary><p>{reason}</p></details>" in html
