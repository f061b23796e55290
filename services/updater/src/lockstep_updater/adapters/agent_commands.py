"""The updater's end of ``node.command``: one in-band command to one node's agent over
core-NATS request/reply, on the updater's own NATS connection.

The channel is authenticated by the server, not by the payload: only the updater's identity may
publish ``agent.command.<site>.<node>`` and only ``agent-<node>`` may hear it (``bus_access``),
so neither a credential nor a secret travels with a command. What comes back:

- an answer (``NodeCommandAnswered``): whatever its status (done, failed, refused,
  interrupted), the agent's word on the command; the caller decides what a status means;
- "no responders": nobody holds the node's subscription (the agent is down, or rebooting): the
  command was not delivered, ``AgentUnavailable`` (try later);
- no answer within the timeout, or the connection lost: the agent may have taken the command,
  ``AgentOutcomeUnknown``; sending it again with the same ``command_id`` is safe (the agent
  answers a repeated id from its journal), a new id is not;
- an ``error`` answer (the agent could not decode the request) or an answer that is not a
  ``NodeCommandAnswered`` for this command: ``AgentRefused``.
"""

from __future__ import annotations

import json

from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError

from lockstep_common import subjects
from lockstep_common.envelope import make_envelope
from lockstep_common.errors import InvalidMessage
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import NodeCommandAnswered, NodeCommandRequested
from lockstep_common.subjects import Namespace
from lockstep_updater.ports import AgentOutcomeUnknown, AgentRefused, AgentUnavailable

MAX_REPLY_BYTES = 64 << 10
DEFAULT_TIMEOUT_S = 1800.0
"""As long as the agent lets a package manager run (``lockstep_agent.commands.TIMEOUT_S``)."""


class NatsAgentCommands:
    """``node.command`` requests on the updater's connection ``nc``, as ``source`` (the
    updater's, ``/lockstep/updater``: the agent refuses any other)."""

    def __init__(
        self,
        nc: NatsClient,
        namespace: Namespace,
        source: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._nc = nc
        self._namespace = namespace
        self._source = source
        self._timeout_s = timeout_s

    async def command(self, cmd: NodeCommandRequested) -> NodeCommandAnswered:
        """Ask the agent of the node ``cmd`` names to carry it out; its answer (see the module
        docstring for the errors)."""
        node_id = cmd.node_id
        subject = self._namespace.wire(subjects.node_command(cmd.site, node_id))
        env = make_envelope(cmd, source=self._source)
        try:
            reply = await self._nc.request(subject, env.to_json(), timeout=self._timeout_s)
        except NoRespondersError:
            raise AgentUnavailable(
                f"no agent of {node_id} listens on {subject}: is it running?"
            ) from None
        except (NatsError, TimeoutError) as exc:
            raise AgentOutcomeUnknown(
                f"{cmd.action} {cmd.command_id} to {node_id}: no answer ({type(exc).__name__}); "
                "it may have run: ask again with the same command id"
            ) from None
        error = (reply.headers or {}).get("Lockstep-Error")
        if error is not None:
            raise AgentRefused(f"agent of {node_id} refused {cmd.command_id}: {error}")
        try:
            answer = REGISTRY.decode(reply.data, max_bytes=MAX_REPLY_BYTES).data
        except InvalidMessage as exc:
            body = json.dumps(reply.data[:200].decode("utf-8", "replace"))
            raise AgentRefused(f"agent of {node_id}: unexpected answer: {exc}: {body}") from None
        if not isinstance(answer, NodeCommandAnswered) or answer.command_id != cmd.command_id:
            raise AgentRefused(
                f"agent of {node_id}: answered {type(answer).__name__} "
                f"{getattr(answer, 'command_id', '')!r} to command {cmd.command_id}"
            )
        return answer
