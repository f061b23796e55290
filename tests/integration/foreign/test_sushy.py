"""Against Redfish services nobody here wrote: sushy-tools (OpenStack's emulators, a test
dependency). ``sushy-emulator --fake`` offers HTTP Basic and no SessionService, an UpdateService
with ``SimpleUpdate`` and no FirmwareInventory; ``sushy-static`` serves the real GB200 capture
read-only and answers every POST 204 without doing anything. Probe and preflight say what each
cannot do; a push one accepts is never reported as an update when the version did not move."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from typer.testing import CliRunner

from lockstep_cli.main import app
from lockstep_redfish import (
    BmcRefused,
    BmcTarget,
    FirmwareImage,
    FirmwareUpdate,
    NotVerified,
    RedfishClient,
    RetryPolicy,
    UpdateRefused,
)
from lockstep_redfish.preflight import UpdateRequest
from lockstep_redfish.probe import reset_refusals
from lockstep_redfish.profile import LoginMethod, profile_named
from lockstep_redfish.tasks import TaskPolicy
from lockstep_redfish.update import UpdatePolicy, policy_for
from tests.integration.sim.pldm_fixtures import GB200_GPU, NEW_GPU_VERSION, package_for
from tests.reference import REFERENCE

pytestmark = pytest.mark.integration
HOST = "127.0.0.1"  # sushy-tools listen on an interface address; the certificate names it
BIN = Path(sys.executable).parent
USER, PASSWORD = "operator", "sushy-pass"
FAST = RetryPolicy(timeout_s=5.0, retries=0, backoff_s=0.01)


@dataclass(frozen=True)
class Foreign:
    url: str
    ca: Path

    def trust(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


class Credentials:
    def __init__(self, password: str = PASSWORD) -> None:
        self.password = password

    def get(self, node_id: str) -> tuple[str, str]:
        return USER, self.password


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for ``HOST`` (its IP in subjectAltName: verified, hostname
    included, against itself as the CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _serve(args: list[str], port: int) -> Iterator[None]:
    """Run a sushy-tools server until the test ends; ready once it accepts connections."""
    server = subprocess.Popen(  # our own venv's console script
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ}
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{args[0]} did not start") from None
                time.sleep(0.05)  # polling for the condition "the port accepts"
        yield
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Foreign]:
    """``sushy-emulator --fake`` over TLS, HTTP Basic against a bcrypt htpasswd file."""
    directory = tmp_path_factory.mktemp("sushy-emulator")
    cert, key = _certificate(directory)
    digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    (directory / "htpasswd").write_text(f"{USER}:{digest}\n")
    (directory / "emulator.conf").write_text(
        f"SUSHY_EMULATOR_AUTH_FILE = {str(directory / 'htpasswd')!r}\n"
    )
    port = _free_port()
    args = [str(BIN / "sushy-emulator"), "--fake", "-i", HOST, "-p", str(port)]
    args += ["--ssl-certificate", str(cert), "--ssl-key", str(key)]
    args += ["--config", str(directory / "emulator.conf")]
    for _ in _serve(args, port):
        yield Foreign(f"https://{HOST}:{port}", cert)


@pytest.fixture(scope="module")
def static_gb200(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Foreign]:
    """``sushy-static`` serving the real GB200 NVL capture over TLS."""
    directory = tmp_path_factory.mktemp("sushy-static")
    cert, key = _certificate(directory)
    port = _free_port()
    mockup = REFERENCE / "redfish-mockups" / "nvidia_gb200" / "redfish" / "v1"
    args = [str(BIN / "sushy-static"), "-i", HOST, "-p", str(port), "-m", str(mockup)]
    args += ["-c", str(cert), "-k", str(key)]
    for _ in _serve(args, port):
        yield Foreign(f"https://{HOST}:{port}", cert)


@pytest.fixture(scope="module")
def static_supermicro(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Foreign]:
    """``sushy-static`` serving the real Supermicro capture (its ``Managers/1``) over TLS."""
    directory = tmp_path_factory.mktemp("sushy-static-smc")
    cert, key = _certificate(directory)
    port = _free_port()
    mockup = REFERENCE / "redfish-mockups" / "supermicro_hgx" / "redfish" / "v1"
    args = [str(BIN / "sushy-static"), "-i", HOST, "-p", str(port), "-m", str(mockup)]
    args += ["-c", str(cert), "-k", str(key)]
    for _ in _serve(args, port):
        yield Foreign(f"https://{HOST}:{port}", cert)


def probe(foreign: Foreign, *extra: str) -> tuple[int, str]:
    env = {"SUSHY_USERNAME": USER, "SUSHY_PASSWORD": PASSWORD}
    result = CliRunner().invoke(
        app,
        [
            "bmc",
            "probe",
            foreign.url,
            "--credentials",
            "env:SUSHY",
            "--ca-file",
            str(foreign.ca),
            *extra,
        ],
        env=env,
    )
    return result.exit_code, result.output


def test_probe_of_sushy_emulator_logs_in_by_basic_and_says_what_is_missing(
    emulator: Foreign,
) -> None:
    code, out = probe(emulator, "--component", "bios", "--json")
    assert code == 1, out
    found = json.loads(out)
    assert found["profile"] == "dmtf-generic"
    assert found["login"] == "basic"  # its root offers no SessionService
    assert found["push"] == "simple_update"
    head = f"BMC {HOST} (profile dmtf-generic)"
    assert found["refusals"] == [
        f"{head}: the account's privileges cannot be read; the profile's calls need "
        "ConfigureComponents, Login",
        f"{head}: no FirmwareInventory member holds bios",
    ]


async def test_a_session_login_on_sushy_emulator_names_what_it_offers(emulator: Foreign) -> None:
    client = RedfishClient(Credentials(), FAST, verify_tls=emulator.trust())
    with pytest.raises(BmcRefused) as refused:
        async with client.session(BmcTarget("sushy", emulator.url)):
            pass
    assert "offers no SessionService" in str(refused.value)
    assert "authentication failed" not in str(refused.value)
    wrong = RedfishClient(Credentials("nope"), FAST, verify_tls=emulator.trust())
    with pytest.raises(BmcRefused, match=r"authentication failed \(HTTP Basic, HTTP 401\)"):
        async with wrong.session(BmcTarget("sushy", emulator.url, login=LoginMethod.BASIC)):
            pass


def test_probe_of_the_static_gb200_capture_picks_its_profile_and_cannot_log_in(
    static_gb200: Foreign,
) -> None:
    code, out = probe(static_gb200)
    assert code == 2
    message = " ".join(out.split())
    assert "no session created (HTTP 204): the answer has no X-Auth-Token" in message


async def test_a_push_sushy_static_accepts_is_never_reported_as_an_update(
    static_gb200: Foreign,
) -> None:
    fw = "/redfish/v1/UpdateService/FirmwareInventory"
    data = package_for(GB200_GPU, NEW_GPU_VERSION)
    image = FirmwareImage(data, hashlib.sha384(data).hexdigest(), "bmc.fwpkg")
    profile = profile_named("nvidia-gb200-nvl")
    bounded = profile.model_copy(
        update={"taskless": profile.taskless.model_copy(update={"wait_s": 0.3})}
    )
    fast = UpdatePolicy(tasks=TaskPolicy(poll_s=0.01, min_poll_s=0.01), read_poll_s=0.05)
    client = RedfishClient(Credentials(), FAST, verify_tls=static_gb200.trust())
    target = BmcTarget("gb200", static_gb200.url, login=LoginMethod.BASIC)  # it checks nothing
    started = asyncio.get_running_loop().time()
    async with client.session(target) as bmc:
        update = FirmwareUpdate(bmc, policy_for(bounded, fast))
        # The real capture's GPUs are not Updateable from this BMC: refused before any push.
        with pytest.raises(UpdateRefused, match="HGX_FW_GPU_0 is not Updateable"):
            await update.update(image, UpdateRequest((f"{fw}/HGX_FW_GPU_0",), NEW_GPU_VERSION))
        # Its BMC firmware is: the push is answered 204 with no task, and nothing changes.
        with pytest.raises(NotVerified, match="unchanged") as refused:
            await update.update(image, UpdateRequest((f"{fw}/FW_BMC_0",), "GB200Nvl-25.01-1"))
    assert f"{fw}/FW_BMC_0" in str(refused.value)
    assert asyncio.get_running_loop().time() - started < 10  # the profile's bound, not 7,200 s


async def test_the_reset_check_reads_the_real_captures_allowable_reset_types(
    static_supermicro: Foreign, static_gb200: Foreign
) -> None:
    """What ``bmc probe`` and preflight ask before any drain, against the captures themselves:
    the Supermicro capture's ``Managers/1`` allows ``GracefulRestart`` only, so its profile's
    reset passes and any other ResetType is refused; the GB200 capture holds no
    ``Chassis/BMC_0`` (the tray its profile power-cycles), which is said, not assumed."""
    smc = profile_named("supermicro-x13")
    forced = smc.model_copy(
        update={"activation": smc.activation.model_copy(update={"reset_type": "ForceRestart"})}
    )
    client = RedfishClient(Credentials(), FAST, verify_tls=static_supermicro.trust())
    target = BmcTarget("smc", static_supermicro.url, login=LoginMethod.BASIC)  # it checks none
    async with client.session(target) as bmc:
        assert await reset_refusals(bmc, smc) == []
        assert await reset_refusals(bmc, forced) == [
            "the profile's activation reset (manager ForceRestart): /redfish/v1/Managers/1: "
            "ResetType 'ForceRestart' not allowed (GracefulRestart)"
        ]
    client = RedfishClient(Credentials(), FAST, verify_tls=static_gb200.trust())
    target = BmcTarget("gb200", static_gb200.url, login=LoginMethod.BASIC)
    async with client.session(target) as bmc:
        (line,) = await reset_refusals(bmc, profile_named("nvidia-gb200-nvl"))
    # sushy-static answers a resource it lacks with a page that is not JSON: named as read.
    assert line.startswith(
        "the profile's activation reset (chassis PowerCycle): /redfish/v1/Chassis/BMC_0 "
        "cannot be read (malformed reply from "
    )
