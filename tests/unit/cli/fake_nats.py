"""A NATS server that answers one subject, for unit tests of the CLI's stdlib NATS request.

Speaks the client protocol's server side on loopback in a thread (INFO, +PONG, MSG/HMSG; the
real nats-server with TLS and identities is tests/integration/test_nats_request.py).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# (payload) -> (headers or None, reply data), or None for "no responders" (status 503).
Answer = Callable[[bytes], tuple[dict[str, str] | None, bytes] | None]


@dataclass
class Seen:
    connects: list[dict[str, object]] = field(default_factory=list)
    requests: list[tuple[str, bytes]] = field(default_factory=list)


@contextmanager
def fake_nats(answer: Answer, *, ping_first: bool = False) -> Iterator[tuple[str, Seen]]:
    """``nats://127.0.0.1:PORT`` of a server answering every PUB with ``answer``, and what it
    saw; ``ping_first``: the server PINGs the client before answering (it must PONG)."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen = Seen()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                _session(conn, answer, seen, ping_first)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"nats://127.0.0.1:{listener.getsockname()[1]}", seen
    finally:
        stop.set()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (Linux)
        listener.close()
        thread.join(timeout=5)


def _session(conn: socket.socket, answer: Answer, seen: Seen, ping_first: bool) -> None:
    conn.sendall(b'INFO {"server_id":"fake","proto":1,"headers":true,"max_payload":1048576}\r\n')
    reader = conn.makefile("rb")
    subs: dict[str, str] = {}
    while line := reader.readline():
        words = line.split()
        if not words:
            continue
        op = words[0].upper()
        if op == b"CONNECT":
            seen.connects.append(json.loads(line[len(b"CONNECT ") :]))
        elif op == b"PING":
            conn.sendall(b"PONG\r\n")
        elif op == b"SUB":
            subs[words[1].decode()] = words[-1].decode()
        elif op == b"PUB":
            subject, reply, size = words[1].decode(), words[2].decode(), int(words[3])
            payload = reader.read(size + 2)[:size]
            seen.requests.append((subject, payload))
            if ping_first:
                conn.sendall(b"PING\r\n")
            result = answer(payload)
            sid = subs[reply]
            if result is None:
                head = b"NATS/1.0 503\r\n\r\n"
                conn.sendall(
                    b"HMSG %s %s %d %d\r\n%s\r\n"
                    % (reply.encode(), sid.encode(), len(head), len(head), head)
                )
            else:
                headers, data = result
                if headers:
                    head = (
                        "NATS/1.0\r\n"
                        + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                        + "\r\n"
                    ).encode()
                    conn.sendall(
                        b"HMSG %s %s %d %d\r\n%s%s\r\n"
                        % (
                            reply.encode(),
                            sid.encode(),
                            len(head),
                            len(head) + len(data),
                            head,
                            data,
                        )
                    )
                else:
                    conn.sendall(
                        b"MSG %s %s %d\r\n%s\r\n" % (reply.encode(), sid.encode(), len(data), data)
                    )
