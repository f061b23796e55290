"""TLS to a BMC is verified unless that BMC's own setting turns it off (design.md non-negotiable
8): a self-signed certificate is a permanent refusal naming the BMC, and nothing is sent."""

from __future__ import annotations

import datetime
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from lockstep_common.errors import Disposition, disposition_for
from lockstep_redfish import BmcTarget, RedfishClient, RetryPolicy
from lockstep_redfish.errors import BmcUntrusted

pytestmark = pytest.mark.integration
HOST = "127.74.0.1"


class Credentials:
    def get(self, node_id: str) -> tuple[str, str]:
        return "admin", "secret"


def _self_signed(directory: Path) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bmc.invalid")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    return context


@pytest.fixture
async def bmc(tmp_path: Path) -> AsyncIterator[tuple[str, list[str]]]:
    """A TLS 'BMC' with a self-signed certificate that logs what reached it."""
    seen: list[str] = []

    async def sessions(request: web.Request) -> web.Response:
        seen.append(request.method)
        if request.method == "POST":
            headers = {"X-Auth-Token": "t", "Location": "/redfish/v1/SessionService/Sessions/1"}
            return web.json_response({}, status=201, headers=headers)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_route("*", "/redfish/v1/SessionService/Sessions{tail:.*}", sessions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0, ssl_context=_self_signed(tmp_path))
    await site.start()
    port = runner.addresses[0][1]
    yield f"https://{HOST}:{port}", seen
    await runner.cleanup()


async def test_an_untrusted_certificate_is_refused_unless_that_bmc_allows_it(
    bmc: tuple[str, list[str]],
) -> None:
    url, seen = bmc
    client = RedfishClient(Credentials(), RetryPolicy(timeout_s=2, retries=2, backoff_s=0.01))
    with pytest.raises(BmcUntrusted, match=r"TLS certificate not trusted") as info:
        async with client.session(BmcTarget("node-1", url)):
            pass
    assert url in str(info.value)
    assert disposition_for(info.value, delivery=1, max_deliver=3) is Disposition.DEAD_LETTER
    assert seen == []  # refused at the handshake: no retries, no credentials sent
    async with client.session(BmcTarget("node-1", url, verify_tls=False)):
        pass
    assert seen == ["POST", "DELETE"]
