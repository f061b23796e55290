"""HTTP Basic for BMCs without a SessionService (DSP0266 §13.2), only over verified TLS; and a
BMC that refuses a session login because it has no sessions is told apart from a wrong
password."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from lockstep_redfish import (
    BmcRefused,
    BmcTarget,
    PlainHttpRefused,
    RedfishClient,
    RedfishReplyError,
    RetryPolicy,
)
from lockstep_redfish.profile import LoginMethod
from tests.integration.redfish.test_tls import _self_signed

pytestmark = pytest.mark.integration
HOST = "127.74.0.2"
FAST = RetryPolicy(timeout_s=2.0, retries=0, backoff_s=0.01)
GOOD = "Basic " + base64.b64encode(b"admin:secret").decode()


class Credentials:
    def __init__(self, password: str = "secret") -> None:  # noqa: S107 - a test account
        self.password = password
        self.read = 0

    def get(self, node_id: str) -> tuple[str, str]:
        self.read += 1
        return "admin", self.password


async def _basic_only_bmc(seen: list[str]) -> web.Application:
    """A Redfish service with no SessionService: the root says so, everything else needs
    Basic; a POST to the sessions URI meets the authentication layer first (401)."""

    async def root(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path}")
        return web.json_response({"@odata.id": "/redfish/v1/", "Id": "RootService"})

    async def guarded(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path} {request.headers.get('Authorization', '-')}")
        if request.headers.get("Authorization") != GOOD:
            return web.json_response({}, status=401)
        return web.json_response({"@odata.id": request.path, "Members": []})

    app = web.Application()
    app.router.add_get("/redfish/v1/", root)
    app.router.add_route("*", "/redfish/v1/{tail:.+}", guarded)
    return app


@pytest.fixture
async def bmc(tmp_path: Path) -> AsyncIterator[tuple[str, ssl.SSLContext, list[str]]]:
    """(url, a client context that trusts its certificate, what reached it)."""
    seen: list[str] = []
    runner = web.AppRunner(await _basic_only_bmc(seen))
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0, ssl_context=_self_signed(tmp_path))
    await site.start()
    trust = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
    trust.check_hostname = False  # the test certificate names bmc.invalid, not the address
    yield f"https://{HOST}:{runner.addresses[0][1]}", trust, seen
    await runner.cleanup()


async def test_basic_over_verified_tls_reads_with_the_password_on_each_request(
    bmc: tuple[str, ssl.SSLContext, list[str]],
) -> None:
    url, trust, seen = bmc
    client = RedfishClient(Credentials(), FAST, verify_tls=trust)
    async with client.session(BmcTarget("n1", url, login=LoginMethod.BASIC)) as session:
        reply = await session.get("/redfish/v1/UpdateService")
    assert reply.body["@odata.id"] == "/redfish/v1/UpdateService"
    assert seen == [
        f"GET /redfish/v1/Managers {GOOD}",  # the login check
        f"GET /redfish/v1/UpdateService {GOOD}",
    ]  # no session created, none to delete


async def test_a_wrong_basic_password_is_an_authentication_failure(
    bmc: tuple[str, ssl.SSLContext, list[str]],
) -> None:
    url, trust, _ = bmc
    client = RedfishClient(Credentials("wrong"), FAST, verify_tls=trust)
    with pytest.raises(BmcRefused, match=r"authentication failed \(HTTP Basic, HTTP 401\)"):
        async with client.session(BmcTarget("n1", url, login=LoginMethod.BASIC)):
            pass


@pytest.mark.parametrize("plain", [True, False])
async def test_basic_is_refused_without_verified_tls_and_nothing_is_sent(
    bmc: tuple[str, ssl.SSLContext, list[str]], plain: bool
) -> None:
    url, _, seen = bmc
    credentials = Credentials()
    if plain:
        target = BmcTarget(
            "n1", url.replace("https", "http"), login=LoginMethod.BASIC, allow_plain_http=True
        )
    else:
        target = BmcTarget("n1", url, verify_tls=False, login=LoginMethod.BASIC)
    with pytest.raises(PlainHttpRefused, match=r"refusing HTTP Basic .* only over verified TLS"):
        async with RedfishClient(credentials, FAST).session(target):
            pass
    assert seen == []
    assert credentials.read == 0


async def test_a_session_login_on_a_bmc_without_sessions_says_what_it_offers(
    bmc: tuple[str, ssl.SSLContext, list[str]],
) -> None:
    url, trust, _ = bmc
    client = RedfishClient(Credentials(), FAST, verify_tls=trust)
    with pytest.raises(BmcRefused) as refused:
        async with client.session(BmcTarget("n1", url)):
            pass
    message = str(refused.value)
    assert "offers no SessionService" in message
    assert "HTTP Basic only" in message
    assert "authentication failed" not in message  # not the password's fault


async def test_a_service_root_that_is_not_an_object_is_a_malformed_reply(tmp_path: Path) -> None:
    async def root(_: web.Request) -> web.Response:
        return web.json_response(["not", "a", "service", "root"])

    app = web.Application()
    app.router.add_get("/redfish/v1/", root)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    try:
        url = f"http://{HOST}:{runner.addresses[0][1]}"
        client = RedfishClient(Credentials(), FAST)
        with pytest.raises(RedfishReplyError, match="the service root is not a JSON object"):
            await client.service_root(BmcTarget("n1", url, allow_plain_http=True))
    finally:
        await runner.cleanup()
