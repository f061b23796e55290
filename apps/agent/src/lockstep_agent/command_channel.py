"""The agent's end of ``node.command``: the updater's in-band commands over core-NATS
request/reply, carried out by the executor (``lockstep_agent.commands``).

The agent subscribes to its own node's ``agent.command.<site>.<node>`` only, the one command
subject the server lets ``agent-<node>`` hear; only the updater's identity may publish there
(``bus_access``), so whoever the server delivers a command from is the updater. The agent may
reply only to a request it received (``allow_responses``).

Commands are carried out one at a time, in the order they came (nats-py runs a
subscription's callback one message at a time, and the executor is awaited inside it): a
repeated id asked while the first is still running waits for it and is then answered from the
journal, never run twice nor answered ``interrupted`` for a command that is still running. A
request that cannot be decoded is answered ``{"error": ...}`` with a ``Lockstep-Error`` header
naming what is wrong (``lockstep_common.responder.refuse``), and nothing is run; so is one whose
payload names another node or whose envelope names another sender than the updater
(``lockstep_common.provenance``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from lockstep_agent.commands import Outcome
from lockstep_common import provenance, subjects
from lockstep_common.envelope import make_envelope
from lockstep_common.errors import InvalidMessage
from lockstep_common.events.v1 import NodeCommandRequested
from lockstep_common.responder import decode, refuse
from lockstep_common.subjects import Namespace

log = logging.getLogger(__name__)
QUEUE = "lockstep-agent"


class Executes(Protocol):
    """What carries a command out: ``commands.Executor`` (or one made on first use)."""

    def execute(self, cmd: NodeCommandRequested, *, dry_run: bool = False) -> Outcome: ...


class CommandChannel:
    """Answers ``node``'s commands at ``site`` with ``executor``'s outcomes."""

    def __init__(self, executor: Executes, namespace: Namespace, site: str, node: str) -> None:
        self.executor = executor
        self.namespace = namespace
        self.subject = namespace.wire(subjects.node_command(site, node))
        self._source = f"lockstep-agent/{node}"

    async def subscribe(self, nc: NatsClient) -> Subscription:
        """Subscribe on ``nc``; the server has the subscription when this returns."""

        async def on_command(msg: Msg) -> None:
            await self.answer(nc, msg)

        # One queue group: were two processes running for this node (a restart overlapping the
        # old one), the server hands each command to one of them, never to both.
        sub = await nc.subscribe(self.subject, queue=QUEUE, cb=on_command)
        await nc.flush()
        return sub

    async def answer(self, nc: NatsClient, msg: Msg) -> None:
        """Carry out the command in ``msg`` and reply with its outcome."""
        if not msg.reply:
            return  # a command nobody waits for is not run: its outcome could not be told
        try:
            request = decode(msg.data, NodeCommandRequested)
            # The payload names this node and comes from the updater (the server let only the
            # updater publish here; an envelope naming anyone else lies).
            provenance.check(request, self.namespace.logical(msg.subject))
        except InvalidMessage as exc:
            await refuse(nc, msg, str(exc))
            return
        cmd = request.data
        log.info("command %s: %s (work item %s)", cmd.command_id, cmd.action, cmd.work_item)
        # The executor blocks (a package manager, a reboot): off the event loop, so the
        # connection keeps answering pings meanwhile.
        outcome = await asyncio.to_thread(self.executor.execute, cmd)
        log.info("command %s: %s %s", cmd.command_id, outcome.status, outcome.detail)
        reply = make_envelope(outcome, source=self._source, correlation_id=str(request.event_id))
        await nc.publish(msg.reply, reply.to_json())
