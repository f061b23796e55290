"""A private CA and a server certificate for the embedded NATS, made by ``lockstep up``.

The CA's key signs one server certificate (127.0.0.1 and localhost as subject alternative
names, RFC 5280 4.2.1.6) and is then discarded: nothing can sign another certificate under this
CA. The certificate serves clients and, in an embedded cluster, authenticates each member to the
others on their routes (mutual TLS: extended key usages serverAuth and clientAuth, RFC 5280
4.2.1.12), so only a holder of its key can join the cluster. Clients trust only ``ca.pem``.
When the server certificate is missing, unreadable, without those usages or within
``RENEW_BEFORE`` of expiry, a new CA and certificate replace both, so clients started after the
renewal read the new ``ca.pem``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)


@dataclass(frozen=True, slots=True)
class ServerTls:
    """Where the CA certificate, the server certificate and its key are."""

    ca: Path
    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Lockstep embedded stack"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _still_valid(tls: ServerTls, now: dt.datetime) -> bool:
    """The three files belong together (a start killed while writing them may have left a new
    key beside an old certificate) and the certificate is not about to expire."""
    try:
        ca = x509.load_pem_x509_certificate(tls.ca.read_bytes())
        cert = x509.load_pem_x509_certificate(tls.cert.read_bytes())
        key = serialization.load_pem_private_key(tls.key.read_bytes(), password=None)
        cert.verify_directly_issued_by(ca)
    except (OSError, ValueError, TypeError, InvalidSignature):
        return False
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False
    if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
        return False  # made before routes authenticated with it: made again
    same_key = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) == cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return same_key and cert.not_valid_after_utc - now > RENEW_BEFORE


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.chmod(mode)
    tmp.replace(path)


def server_tls(
    directory: Path, now: dt.datetime | None = None, *, dns_names: tuple[str, ...] = ()
) -> ServerTls:
    """The CA and server certificate under ``directory``, made or renewed as needed.
    ``dns_names``: host names the certificate also serves, besides localhost and the loopback
    addresses (a deployment's ``nats-1``, ``nats-2``, ``nats-3``)."""
    now = now or dt.datetime.now(dt.UTC)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    out = ServerTls(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
    if _still_valid(out, now):
        return out
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"Lockstep stack CA {now:%Y-%m-%d %H:%M:%S}")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("nats-server"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    *(x509.DNSName(name) for name in dns_names),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write(
        out.key,
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        0o600,
    )
    _write(out.cert, cert.public_bytes(pem), 0o644)
    _write(out.ca, ca.public_bytes(pem), 0o644)
    return out
