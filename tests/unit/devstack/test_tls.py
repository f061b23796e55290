"""The embedded NATS's CA and certificate: kept while sound, remade when not."""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from lockstep_devstack.tls import server_tls

NOW = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)


def _serial(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def test_a_sound_set_is_kept_and_clients_can_verify_it(tmp_path: Path) -> None:
    tls = server_tls(tmp_path / "tls", NOW)
    first = _serial(tls.cert)
    assert _serial(server_tls(tmp_path / "tls", NOW).cert) == first
    assert tls.key.stat().st_mode & 0o077 == 0
    context = ssl.create_default_context(cafile=str(tls.ca))  # the CA file loads as a trust root
    context.load_cert_chain(tls.cert, tls.key)  # and the key belongs to the certificate
    cert = x509.load_pem_x509_certificate(tls.cert.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)


def test_a_key_that_does_not_match_or_a_certificate_near_expiry_is_remade(tmp_path: Path) -> None:
    tls = server_tls(tmp_path / "tls", NOW)
    first = _serial(tls.cert)
    stray = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    tls.key.write_bytes(stray)  # as a start killed between writing the key and the certificate
    second = _serial(server_tls(tmp_path / "tls", NOW).cert)
    assert second != first
    ssl.create_default_context().load_cert_chain(tls.cert, tls.key)
    later = NOW + dt.timedelta(days=340)  # within 30 days of the year's end
    assert _serial(server_tls(tmp_path / "tls", later).cert) != second


def test_the_certificate_serves_clients_and_authenticates_cluster_routes(tmp_path: Path) -> None:
    tls = server_tls(tmp_path / "tls", NOW)
    cert = x509.load_pem_x509_certificate(tls.cert.read_bytes())
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}


def test_a_certificate_made_before_routes_used_it_is_remade(tmp_path: Path) -> None:
    tls = server_tls(tmp_path / "tls", NOW)
    old = x509.load_pem_x509_certificate(tls.cert.read_bytes())
    key = serialization.load_pem_private_key(tls.key.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    # Server authentication only, as the single server's certificates were made: a member of a
    # cluster could not present it to the others.
    server_only = (
        x509.CertificateBuilder()
        .subject_name(old.subject)
        .issuer_name(old.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(minutes=5))
        .not_valid_after(NOW + dt.timedelta(days=365))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    tls.cert.write_bytes(server_only.public_bytes(serialization.Encoding.PEM))
    tls.ca.write_bytes(server_only.public_bytes(serialization.Encoding.PEM))  # self-issued
    remade = server_tls(tmp_path / "tls", NOW)
    cert = x509.load_pem_x509_certificate(remade.cert.read_bytes())
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usages
    assert cert.serial_number != server_only.serial_number
