"""One core-NATS request and its reply, with the standard library only (socket, ssl).

For ``lockstep fleet admit``, which a Slurm prolog runs for every job: nats-py needs asyncio
and imports aiohttp (its WebSocket transport) on import, about 0.3 s of a 0.3 s budget
(issue 14, item 7). A request/reply needs four protocol lines, so this speaks them directly,
authenticated exactly as nats-py would be: TLS verified against the stack's CA (host name
included) when the URL is ``tls://`` or a CA is given, and the identity's user and password
(read from its file at connect time, never logged). Replies arrive in the identity's own
inbox (``_INBOX_<user>``), the only one the server lets it read.

Protocol: NATS client protocol, docs.nats.io "Client Protocol" (INFO, CONNECT, PING/PONG,
SUB, PUB, MSG, HMSG, -ERR); no-responders is a ``503`` status header (ADR-9 / "Headers").
"""

from __future__ import annotations

import json
import secrets
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lockstep_common.natsconn import AccessError, NatsAccess

DEFAULT_PORT = 4222
MAX_CONTROL_LINE = 4096  # nats-server's default max_control_line
SCHEMES = ("nats", "tls")


class Unreachable(OSError):
    """No server of the list could be connected to (each server's reason, joined)."""


class Refused(Exception):
    """The server answered with -ERR: a bad password, a permission the identity lacks."""


class NoResponders(Exception):
    """The server says nobody subscribes to the subject (status 503)."""


class NoReply(TimeoutError):
    """No reply before the deadline."""


@dataclass(frozen=True, slots=True)
class Reply:
    data: bytes
    headers: dict[str, str]


def supported(access: NatsAccess) -> bool:
    """Whether every server URL is one this client speaks (not ``ws://``/``wss://``)."""
    return all(
        urlsplit(u if "://" in u else f"nats://{u}").scheme in SCHEMES for u in access.servers
    )


def request(
    access: NatsAccess, subject: str, payload: bytes, timeout_s: float, *, name: str
) -> Reply:
    """Connect to the first server of ``access`` that answers, publish ``payload`` on
    ``subject`` and return the reply; one deadline for all of it.

    Raises:
        AccessError: credentials or CA file unusable.
        Unreachable: no server could be connected to, or the server refused the identity.
        NoResponders: nobody listens on ``subject``.
        NoReply: nothing within ``timeout_s``.
        Refused: the server refused the subscription or the publish (a permission).
    """
    deadline = time.monotonic() + timeout_s
    options = access.options()  # the password read now, from its file; the CA's context
    failures: list[str] = []
    for url in access.servers:
        try:
            conn = _Connection.open(url, options, deadline, name=name)
        except (OSError, Refused) as exc:  # ssl.SSLError is an OSError
            failures.append(f"{url}: {type(exc).__name__} {exc}".rstrip())
            continue
        with conn:
            return conn.request(subject, payload, options.get("inbox_prefix", "_INBOX"), deadline)
    raise Unreachable("; ".join(failures))


class _Connection:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()

    @classmethod
    def open(cls, url: str, options: dict[str, Any], deadline: float, *, name: str) -> _Connection:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        host, port = parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORT
        sock = socket.create_connection((host, port), timeout=_left(deadline))
        # Each protocol line is one small write: without this, Nagle's algorithm holds CONNECT
        # back until the server's delayed ACK, 40 ms (asyncio, hence nats-py, sets it too).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = cls(sock)
        try:
            conn._handshake(host, parts.scheme == "tls", options, deadline, name)
        except BaseException:
            conn.close()
            raise
        return conn

    def _handshake(
        self, host: str, tls: bool, options: dict[str, Any], deadline: float, name: str
    ) -> None:
        info = self._info(deadline)
        context: ssl.SSLContext | None = options.get("tls")
        if context is None and (tls or info.get("tls_required")):
            context = ssl.create_default_context()  # the system's CAs, as nats-py does
        if context is not None:
            # Upgrade after INFO, as nats-server expects unless handshake_first is set; the
            # certificate and the host name are verified (check_hostname).
            self._sock = context.wrap_socket(self._sock, server_hostname=host)
        connect: dict[str, object] = {
            "verbose": False,
            "pedantic": False,
            "tls_required": context is not None,
            "name": name,
            "lang": "python3",
            "version": "lockstep",
            "protocol": 1,
            "headers": True,
            "no_responders": True,
        }
        if "user" in options:
            connect["user"] = options["user"]
            connect["pass"] = options["password"]
        self._send(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n", deadline)
        while (line := self._line(deadline)) != b"PONG":
            self._control(line, deadline)

    def _control(self, line: bytes, deadline: float) -> None:
        """A line that is not the one awaited: answer a PING, raise an -ERR."""
        if line == b"PING":
            self._send(b"PONG\r\n", deadline)
        elif line.startswith(b"-ERR"):
            # "Authorization Violation", "Permissions Violation for Publish to ...".
            raise Refused(line[4:].strip().decode(errors="replace").strip("'"))

    def __enter__(self) -> _Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def request(self, subject: str, payload: bytes, prefix: str, deadline: float) -> Reply:
        inbox = f"{prefix}.{secrets.token_hex(11)}"
        self._send(
            b"SUB %s 1\r\nPUB %s %s %d\r\n%s\r\nPING\r\n"
            % (inbox.encode(), subject.encode(), inbox.encode(), len(payload), payload),
            deadline,
        )
        while not (line := self._line(deadline)).startswith((b"MSG ", b"HMSG ")):
            self._control(line, deadline)
        return self._message(line, deadline)

    def _message(self, line: bytes, deadline: float) -> Reply:
        fields = line.split()
        headers: dict[str, str] = {}
        if fields[0] == b"HMSG":
            header_len, total = int(fields[-2]), int(fields[-1])
            body = self._exactly(total + 2, deadline)[:total]
            head, data = body[:header_len], body[header_len:]
            status, *rest = head.decode(errors="replace").split("\r\n")
            if status.split()[1:2] == ["503"]:
                raise NoResponders(f"no responders on {fields[1].decode()}")
            for h in rest:
                key, sep, value = h.partition(":")
                if sep:
                    headers[key.strip()] = value.strip()
            return Reply(bytes(data), headers)
        size = int(fields[-1])
        return Reply(bytes(self._exactly(size + 2, deadline)[:size]), headers)

    def _info(self, deadline: float) -> dict[str, Any]:
        line = self._line(deadline)
        if not line.startswith(b"INFO "):
            raise Refused(f"not a NATS server (first line {line[:40]!r})")
        info = json.loads(line[5:])
        if not isinstance(info, dict):
            raise Refused("not a NATS server (INFO is not an object)")
        return info

    def _send(self, data: bytes, deadline: float) -> None:
        self._sock.settimeout(_left(deadline))
        self._sock.sendall(data)

    def _line(self, deadline: float) -> bytes:
        while True:
            end = self._buf.find(b"\r\n")
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[: end + 2]
                return line
            if len(self._buf) > MAX_CONTROL_LINE + 2:
                raise Refused("protocol line too long")
            self._fill(deadline)

    def _exactly(self, n: int, deadline: float) -> bytearray:
        while len(self._buf) < n:
            self._fill(deadline)
        out = self._buf[:n]
        del self._buf[:n]
        return out

    def _fill(self, deadline: float) -> None:
        self._sock.settimeout(_left(deadline))
        try:
            chunk = self._sock.recv(65536)
        except TimeoutError:
            raise NoReply("no reply in time") from None
        if not chunk:
            raise ConnectionResetError("the server closed the connection")
        self._buf += chunk


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise NoReply("no reply in time")
    return left


__all__ = [
    "AccessError",
    "NoReply",
    "NoResponders",
    "Refused",
    "Reply",
    "Unreachable",
    "request",
    "supported",
]
