"""How any Lockstep process connects to NATS: as one named identity, over TLS when a CA is given.

Every process (service, CLI, node agent, administrator) connects with a user name and a password
read from a file at connect time, so the secret is never on a command line, in an environment
listing or in a log line. Each identity gets its own inbox prefix (``_INBOX_<user>``): the
server's permissions then let only that identity read its replies and JetStream deliveries
(nats-server "Authorization", allow_responses; nats.py ``inbox_prefix``).
"""

from __future__ import annotations

import logging
import os
import ssl
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockstep_common.identities import agent_node
from lockstep_common.subjects import token

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient


class _QuietTlsEof(logging.Filter):
    """nats.py's protocol returns True from ``eof_received`` (keep the transport half open),
    which asyncio's SSL transport cannot do and reports at WARNING on every close of a TLS
    connection: harmless, and noise in every command's output, so dropped here only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received() has no effect when using ssl" not in record.getMessage()


logging.getLogger("asyncio").addFilter(_QuietTlsEof())
log = logging.getLogger(__name__)


async def log_briefly(exc: Exception) -> None:
    """The default ``error_cb``: one debug line. nats-py's own logs every asynchronous error
    with its traceback: a permissions violation the failing call reports itself, or the TLS
    close race (``APPLICATION_DATA_AFTER_CLOSE_NOTIFY``) after a command's last reply, which
    printed tracebacks on the CLI's stderr. Services pass their own (a warning line)."""
    log.debug("nats: %s: %s", type(exc).__name__, exc)


class AccessError(ValueError):
    """Credentials that cannot be used: named, never quoted."""


def inbox_prefix(user: str) -> str:
    """The inbox prefix of ``user``: replies and deliveries to it arrive below it."""
    return f"_INBOX_{user}"


def read_secret(path: Path, what: str) -> str:
    """The one-line secret in ``path``, refused when other users could read it (as ssh does)."""
    try:
        st = path.stat()
    except OSError as exc:
        raise AccessError(f"{what} {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise AccessError(f"{what} {path} is not a regular file")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AccessError(
            f"{what} {path} is open to other users (mode {stat.S_IMODE(st.st_mode):04o}): "
            "chmod 600 it"
        )
    secret = path.read_text(encoding="utf-8").strip()
    if not secret or "\n" in secret:
        raise AccessError(f"{what} {path} must hold one non-empty line")
    return secret


@dataclass(frozen=True, slots=True)
class NatsAccess:
    """Where and as whom to connect.

    Args:
        servers: URLs, ``tls://`` when the server requires TLS.
        user: the identity; None connects anonymously (an unsecured development server only).
        password_file: file holding the identity's password (mode 0600).
        nkey_file: instead of a password, the file holding the identity's nkey seed (mode
            0600; a node agent, ``lockstep agent enroll``): the server's nonce is signed with
            it, and the seed never leaves the process.
        ca_file: PEM bundle of the CA that signed the server's certificate; set, TLS is used
            and the server's certificate and host name are verified against it.
    """

    servers: tuple[str, ...]
    user: str | None = None
    password_file: Path | None = None
    ca_file: Path | None = None
    nkey_file: Path | None = None

    def __post_init__(self) -> None:
        if self.password_file is not None and self.nkey_file is not None:
            raise AccessError("a NATS user has a password file or an nkey file, not both")
        secret = self.password_file or self.nkey_file
        if (self.user is None) != (secret is None):
            raise AccessError(
                "a NATS user needs a password file (or an nkey file), and such a file a user"
            )
        if self.user is not None:
            node = agent_node(self.user)
            token(node if node is not None else self.user, "NATS user")

    @classmethod
    def from_url(
        cls,
        url: str,
        user: str | None = None,
        password_file: Path | None = None,
        ca_file: Path | None = None,
    ) -> NatsAccess:
        """From a comma-separated URL list, as settings spell it."""
        return cls(tuple(u.strip() for u in url.split(",")), user, password_file, ca_file)

    def env(self) -> dict[str, str]:
        """The ``LOCKSTEP_NATS_*`` variables that give a child process this access."""
        out = {"LOCKSTEP_NATS_URL": ",".join(self.servers)}
        if self.user is not None:
            out["LOCKSTEP_NATS_USER"] = self.user
        if self.password_file is not None:
            out["LOCKSTEP_NATS_PASSWORD_FILE"] = str(self.password_file)
        if self.nkey_file is not None:
            out["LOCKSTEP_NATS_NKEY_FILE"] = str(self.nkey_file)
        if self.ca_file is not None:
            out["LOCKSTEP_NATS_CA_FILE"] = str(self.ca_file)
        return out

    def options(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect`` (the password read now, from its file)."""
        opts: dict[str, Any] = {"servers": list(self.servers)}
        if self.user is not None and self.password_file is not None:
            opts["user"] = self.user
            opts["password"] = read_secret(self.password_file, "NATS password file")
            opts["inbox_prefix"] = inbox_prefix(self.user)
        if self.user is not None and self.nkey_file is not None:
            # nats-py signs the server's nonce with the seed (nats-server "NKeys").
            opts["nkeys_seed_str"] = read_secret(self.nkey_file, "NATS nkey file")
            opts["inbox_prefix"] = inbox_prefix(self.user)
        if self.ca_file is not None:
            if not os.access(self.ca_file, os.R_OK):
                raise AccessError(f"NATS CA file {self.ca_file} cannot be read")
            context = ssl.create_default_context(cafile=str(self.ca_file))
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            opts["tls"] = context
        return opts


# A server that stops answering without closing its sockets (a process paused by SIGSTOP, a
# stalled VM: test plan A3) is only noticed by pings. nats-py's defaults (a ping every 120 s,
# 2 unanswered allowed) leave a client on it for up to six minutes while the rest of the
# cluster serves; measured: the A3 test's producer never moved off a paused server within its
# 300 s. A ping every 5 s with 3 unanswered allowed moves it within 20 s, and costs one small
# frame per connection every 5 s.
PING_INTERVAL_S = 5
MAX_OUTSTANDING_PINGS = 3


async def connect(access: NatsAccess, *, name: str, **options: Any) -> NatsClient:
    """Connect as ``access`` says; ``options`` are further ``nats.connect`` keywords (the
    ping settings above unless given)."""
    # Imported here: nats-py pulls in aiohttp, and a command that only builds settings (or
    # prints --help) must not pay for it.
    import nats

    options.setdefault("ping_interval", PING_INTERVAL_S)
    options.setdefault("max_outstanding_pings", MAX_OUTSTANDING_PINGS)
    options.setdefault("error_cb", log_briefly)
    return await nats.connect(name=name, **access.options(), **options)
