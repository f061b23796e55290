"""The names every Lockstep process is known by: its NATS identity, its database role and, for
a service, the prefix of its settings (``LOCKSTEP_<NAME>_*``).

Plain strings in a module that imports nothing, so that a command's ``--help`` can name them
without loading the messaging or settings code (``bus_access`` derives the permissions).
"""

from __future__ import annotations

ADMIN = "admin"
CLI = "cli"
AGENT = "agent"
READER = "reader"
SERVICE_NAMES = ("inventory", "planner", "updater", "healthgate", "attest")
