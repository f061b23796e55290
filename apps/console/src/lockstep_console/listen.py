"""Where the console listens and what that requires (issue 32, "safe by default"): loopback
needs nothing more; any other address needs TLS (a certificate and its key) and a login (a
static token file, mode 0600), or the console refuses to start. Pure: no socket is opened
here."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

DEFAULT = "127.0.0.1:8080"


class ListenError(ValueError):
    """The listen address, or what it requires, is not usable: one line saying why."""


@dataclass(frozen=True, slots=True)
class Listen:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a host name may resolve anywhere


def parse(text: str) -> Listen:
    """``HOST:PORT`` or ``[V6]:PORT``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ListenError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT}")
    host = host.removeprefix("[").removesuffix("]")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ListenError(f"--listen {text!r}: the port must be 1..65535")
    return Listen(host, int(port))


def require(listen: Listen, cert: Path | None, key: Path | None, token_file: Path | None) -> None:
    """Refuse a listen address beyond loopback without TLS and a token file."""
    if (cert is None) != (key is None):
        raise ListenError("--tls-cert and --tls-key go together")
    if listen.loopback:
        return
    missing = [
        name
        for name, given in (("--tls-cert/--tls-key", cert), ("--token-file", token_file))
        if given is None
    ]
    if missing:
        raise ListenError(
            f"--listen {listen.host}:{listen.port} is beyond loopback: it needs "
            + " and ".join(missing)
            + " (see docs/console.md)"
        )
