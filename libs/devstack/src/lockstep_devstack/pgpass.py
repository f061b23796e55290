"""Passwords of the embedded PostgreSQL's roles, kept in files under the data directory.

Each identity (the bootstrap superuser, the admin, each service) has a random password,
generated the first time it is needed and written to ``<secrets>/<identity>/pgpass`` in libpq's
password-file format (PostgreSQL 16 docs, 34.16 "The Password File"), so that libpq tools
(``PGPASSFILE``) and asyncpg (the ``passfile`` connection parameter) read it themselves: the
password never appears on a command line, in an environment variable or in a URL. Files are
mode 0600 in 0700 directories (libpq ignores a password file that others may read).

Roles get a SCRAM-SHA-256 verifier, never the password: SQL carrying it may end up in the
server's log (``log_min_error_statement``), and a verifier there reveals nothing that logs in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

# What an identity may be called: it names a directory and, prefixed, a role.
_IDENTITY = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
# RFC 7677 asks for at least 4096 iterations; PostgreSQL's default (scram_iterations) is 4096.
SCRAM_ITERATIONS = 4096
# libpq matches "localhost" for connections over a Unix socket, 127.0.0.1 over TCP.
_HOSTS = ("127.0.0.1", "localhost")


def check_identity(identity: str) -> str:
    """``identity`` if it is a plain lower-case name (letters, digits, '_'), else ValueError."""
    if not _IDENTITY.fullmatch(identity):
        raise ValueError(
            f"{identity!r} is not a valid identity (a lower-case letter, then letters, digits "
            "or '_', at most 48)"
        )
    return identity


def passfile_path(secrets_dir: Path, identity: str) -> Path:
    """Where ``identity``'s password file lives."""
    return secrets_dir / check_identity(identity) / "pgpass"


def _private_dir(path: Path) -> None:
    """Create ``path`` (and parents) as 0700; tighten it if it already exists."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)


def read_password(path: Path, role: str) -> str | None:
    """The password stored for ``role`` in the password file at ``path``, or None."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        # Our passwords hold no ':' or '\', so the file needs none of libpq's escapes.
        fields = line.split(":")
        if len(fields) == 5 and fields[3] == role:
            return fields[4]
    return None


def write_password(
    path: Path, role: str, password: str, *, hosts: tuple[str, ...] = _HOSTS
) -> None:
    """Write the password file for ``role`` atomically, mode 0600 from the first byte;
    ``hosts``: the server names it answers for (a deployment's ``postgres``)."""
    if ":" in password or "\\" in password or "\n" in password:
        raise ValueError("a password for a libpq password file must hold no ':', '\\' or newline")
    _private_dir(path.parent.parent)
    _private_dir(path.parent)
    lines = "".join(f"{host}:*:*:{role}:{password}\n" for host in hosts)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a file left by a crash
        os.write(fd, lines.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    staging.replace(path)


def ensure_password(path: Path, role: str) -> str:
    """``role``'s password from ``path``, generated and stored there on first use."""
    _private_dir(path.parent.parent)
    _private_dir(path.parent)
    if path.exists():
        path.chmod(0o600)
    password = read_password(path, role)
    if password is None:
        password = secrets.token_urlsafe(32)  # 256 bits; only [A-Za-z0-9_-]
        write_password(path, role, password)
    return password


def scram_verifier(password: str, *, salt: bytes | None = None) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for ``password`` (RFC 5802 section 3,
    RFC 7677; the ``SCRAM-SHA-256$iterations:salt$StoredKey:ServerKey`` text of
    ``pg_authid.rolpassword``). ``ALTER ROLE ... PASSWORD`` given this text stores it as is.

    The password must be ASCII without control characters, which SASLprep leaves unchanged.
    """
    if not password.isascii() or not password.isprintable():
        raise ValueError("only printable ASCII passwords are supported")
    salt = salt if salt is not None else os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, SCRAM_ITERATIONS)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return f"SCRAM-SHA-256${SCRAM_ITERATIONS}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"
