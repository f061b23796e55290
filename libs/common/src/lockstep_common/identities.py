"""The names every Lockstep process is known by: its NATS identity, its database role and, for
a service, the prefix of its settings (``LOCKSTEP_<NAME>_*``).

Plain strings in a module that imports nothing, so that a command's ``--help`` can name them
without loading the messaging or settings code (``bus_access`` derives the permissions).
"""

from __future__ import annotations

ADMIN = "admin"
CLI = "cli"
READER = "reader"
SYSTEM = "system"
"""nats-server's system account user: the embedded stack's health checks and reloads."""
AGENT_PREFIX = "agent-"
NODE_PLACEHOLDER = "<node>"
SITE_PLACEHOLDER = "<site>"


def agent_identity(node: str) -> str:
    """The NATS identity of ``node``'s agent: one per node, so that a node's credential speaks
    for that node only (issue 26). Not checked here (this module imports nothing): the node id
    is a subject token, checked where subjects are spelled."""
    return f"{AGENT_PREFIX}{node}"


def agent_node(identity: str) -> str | None:
    """The node whose agent ``identity`` is, or None for any other identity."""
    return identity.removeprefix(AGENT_PREFIX) if identity.startswith(AGENT_PREFIX) else None


AGENT = agent_identity(NODE_PLACEHOLDER)
"""The node agents' grants as a template (``bus_access.node_agent`` fills in a node): the row
docs/bus-access.md shows; no one connects as it."""
SERVICE_NAMES = ("inventory", "planner", "updater", "healthgate", "attest")
