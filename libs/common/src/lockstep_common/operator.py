"""Operator commands over the bus: how a service answers ``lockstep fleet list`` and the like.

The operator CLI holds no database credentials (issue 26, item 3): it asks the service that owns
the data on ``ops.<identity>.<service>.<command>`` (core NATS request/reply) with a typed
request from the event catalogue, and gets the command's typed answer, or an ``ops.refused``
naming why not. The contract of :class:`OperatorResponder`:

- **Who asked is the server's word.** Each operator identity may publish only under its own
  ``ops.<identity>.>`` (``bus_access.OPERATORS``), so the subject's identity token is the
  identity nats-server authenticated; nothing in the payload or a header is believed.
  :func:`refusal_for` then says what that identity may run: ``reader`` read commands only,
  ``cli`` and ``admin`` every command, anyone else nothing.
- **Answered only by the owning service**: only its identity may subscribe to its commands
  (``Party.answers``), and it replies only to a request it received (``allow_responses``).
- **A write is idempotent by request id** (the request envelope's id): the command's effects and
  its ``operator_requests`` row commit in one transaction, so a retry with the same id gets the
  first reply, byte for byte, and changes nothing twice; the same id with another request, or
  from another identity, is refused. Two copies racing wait on the row's key: one runs.
- **Every write is recorded with the identity that asked**, run or refused (the service's
  audit, ``operator_requests``); one that failed (an error, rolled back) is not, and may be
  asked again. Reads change nothing and are not recorded.
- **A queued write can reply with its outcome**: ``Command.settle`` runs after the write
  commits (the planner's controls: its worker's pass carries the command out at once).
- **Errors are replies**: a request that cannot be decoded, a command this identity may not
  run, bad input, or a failure get ``ops.refused`` (and a ``Lockstep-Error`` header), never
  silence; a refused command changed nothing.
- **Replies fit the bus**: an answer larger than the server's max payload is refused as a
  failure (commands page their lists so that none is).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import asyncpg
from nats.aio.msg import Msg

from lockstep_common import subjects
from lockstep_common.db import Conn
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.errors import InvalidMessage
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import OpsRefused
from lockstep_common.identities import ADMIN, CLI, READER
from lockstep_common.responder import MAX_REQUEST_BYTES, answer_side_by_side
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import TEXT_MAX

if TYPE_CHECKING:
    from lockstep_common.service import Resources

log = logging.getLogger(__name__)

RefusalKind = Literal["forbidden", "invalid", "not_found", "conflict", "failed"]
# Who may run what (the server has already proven who is asking): a reader reads.
MAY_WRITE: frozenset[str] = frozenset({CLI, ADMIN})
MAY_READ: frozenset[str] = MAY_WRITE | {READER}

Req = TypeVar("Req", bound=EventData)


async def purge(conn: Conn, older_than_s: float) -> int:
    """Delete operator requests asked longer ago than the retention; returns how many (a fleet
    import's chunks are stored whole, ~200 KB each: without it the table only grows)."""
    result: str = await conn.execute(
        "DELETE FROM operator_requests WHERE asked_at < now() - make_interval(secs => $1)",
        older_than_s,
    )
    return int(result.rsplit(" ", 1)[-1])


class Refusal(Exception):
    """A command that cannot be run as asked: ``kind`` and one line saying why.

    Raised by a command's ``run``; its transaction is rolled back, so nothing changed.
    """

    def __init__(self, kind: RefusalKind, reason: str) -> None:
        super().__init__(reason)
        self.kind: RefusalKind = kind
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Asker:
    """Who asked (from the subject), the service asked, the request's id and when it was
    answered."""

    service: str
    identity: str
    request_id: uuid.UUID
    now: dt.datetime


@dataclass(frozen=True, slots=True)
class Command(Generic[Req]):
    """One operator command a service answers.

    Args:
        name: its subject tokens after the service (``fleet.list``).
        request: the request class; ``answer``: the class of a successful reply.
        run: the command on one connection; raises :class:`Refusal` to refuse. A write
            command runs inside the transaction that records it.
        writes: whether it changes anything (then the reader may not run it, and it is
            recorded and idempotent by request id).
        settle: for a write another part of the service carries out (a queued command), run
            after the write commits, on the same connection, to turn its answer into the
            outcome; that outcome is the reply, and the one a retry gets.
    """

    name: str
    request: type[Req]
    answer: type[EventData]
    run: Callable[[Conn, Req, Asker], Awaitable[EventData]]
    writes: bool = False
    settle: Callable[[Conn, EventData, Asker], Awaitable[EventData]] | None = None


def refusal_for(identity: str, command: Command[Any]) -> str | None:
    """Why ``identity`` may not run ``command`` (None: it may)."""
    allowed = MAY_WRITE if command.writes else MAY_READ
    if identity in allowed:
        return None
    if identity in MAY_READ:
        return (
            f"identity {identity!r} may only read: {command.name} changes the fleet "
            f"(run it as {CLI!r})"
        )
    return f"identity {identity!r} may not run operator commands"


def parse_subject(namespace: Namespace, service: str, wire: str) -> tuple[str, str]:
    """``(identity, command)`` of a request's wire subject; ``ValueError`` if not ours."""
    tokens = namespace.logical(wire).split(".")
    if len(tokens) < 4 or tokens[0] != "ops" or tokens[2] != service:
        raise ValueError(f"{wire!r} is not an operator request to {service}")
    return tokens[1], ".".join(tokens[3:])


def digest(data: EventData) -> str:
    """The request's fingerprint: the same id with another request is refused."""
    return hashlib.sha256(data.model_dump_json().encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply envelope, and why the command was refused when it was."""

    data: bytes
    refused: str | None = None


class OperatorResponder:
    """A service worker answering its operator commands until the service stops."""

    def __init__(
        self,
        service: str,
        namespace: Namespace,
        source: str,
        commands: Sequence[Command[Any]],
        *,
        concurrency: int | None = None,
    ) -> None:
        self._service = service
        self._namespace = namespace
        self._source = source
        self._commands = {c.name: c for c in commands}
        self._concurrency = concurrency
        self._resources: Resources | None = None
        self.subscribed = asyncio.Event()
        """Set once every command's subscription reached the server."""

    def subjects(self) -> list[str]:
        """One subscription per command, any asker: ``ops.*.<service>.<command>``."""
        return [
            self._namespace.wire(subjects.ops_command_all(self._service, name))
            for name in self._commands
        ]

    async def run(self, resources: Resources, stopping: asyncio.Event) -> None:
        self._resources = resources
        await answer_side_by_side(
            resources,
            stopping,
            self.subjects(),
            f"{self._service}-ops",
            self._handle,
            self._concurrency,
            self.subscribed,
        )

    async def _handle(self, msg: Msg) -> None:
        if not msg.reply or self._resources is None:
            return
        nc = self._resources.nc
        reply = await self.reply_to(self._resources.pool, msg.subject, msg.data, nc.max_payload)
        headers = None
        if reply.refused is not None:
            headers = {"Lockstep-Error": reply.refused[:200].replace("\n", " ")}
        await nc.publish(msg.reply, reply.data, headers=headers)

    async def reply_to(
        self, pool: asyncpg.Pool, subject: str, payload: bytes, max_payload: int
    ) -> Reply:
        """The reply envelope to one request (the whole contract above, minus the wire)."""
        try:
            identity, name = parse_subject(self._namespace, self._service, subject)
        except ValueError as exc:
            return self._refused("?", uuid.uuid4(), "invalid", str(exc))
        command = self._commands.get(name)
        if command is None:
            return self._refused(name, uuid.uuid4(), "invalid", f"no command {name}")
        try:
            env = REGISTRY.decode(payload, max_bytes=MAX_REQUEST_BYTES)
        except InvalidMessage as exc:
            return self._refused(name, uuid.uuid4(), "invalid", str(exc))
        if not isinstance(env.data, command.request):
            reason = f"expected {command.request.event_type}, got {env.type}"
            return self._refused(name, env.event_id, "invalid", reason)
        asker = Asker(self._service, identity, env.event_id, dt.datetime.now(dt.UTC))
        async with pool.acquire() as conn:
            if not command.writes:
                reply = await self._read(conn, command, env.data, asker)
            else:
                reply = await self._write(conn, command, env.data, asker)
        if len(reply.data) > max_payload:
            return self._refused(name, env.event_id, "failed", "the answer is too large")
        return reply

    async def _read(
        self, conn: Conn, command: Command[Any], data: EventData, asker: Asker
    ) -> Reply:
        forbidden = refusal_for(asker.identity, command)
        if forbidden is not None:
            return self._refused(command.name, asker.request_id, "forbidden", forbidden)
        try:
            answer = await command.run(conn, data, asker)
        except Refusal as exc:
            return self._refused(command.name, asker.request_id, exc.kind, exc.reason)
        except Exception as exc:  # noqa: BLE001 - logged, and the asker told why
            return self._failed(command, asker, exc)
        return self._answered(answer, asker)

    async def _write(
        self, conn: Conn, command: Command[Any], data: EventData, asker: Asker
    ) -> Reply:
        fingerprint = digest(data)
        request = data.model_dump_json()
        forbidden = refusal_for(asker.identity, command)
        refusal: Refusal
        if forbidden is None:
            try:
                async with conn.transaction():
                    claimed = await conn.fetchval(
                        "INSERT INTO operator_requests (request_id, identity, command, digest,"
                        " request, outcome, reply) VALUES ($1, $2, $3, $4, $5::jsonb, 'done', '')"
                        " ON CONFLICT (request_id) DO NOTHING RETURNING true",
                        asker.request_id,
                        asker.identity,
                        command.name,
                        fingerprint,
                        request,
                    )
                    if not claimed:
                        return await self._again(conn, command, asker, fingerprint)
                    answer = await command.run(conn, data, asker)
                    reply = self._answered(answer, asker)
                    await conn.execute(
                        "UPDATE operator_requests SET reply = $2 WHERE request_id = $1",
                        asker.request_id,
                        reply.data,
                    )
                    log.info(
                        "%s ran %s (request %s)", asker.identity, command.name, asker.request_id
                    )
                return await self._settled(conn, command, answer, asker, reply)
            except Refusal as exc:
                refusal = exc
            except Exception as exc:  # noqa: BLE001 - logged, and the asker told why
                return self._failed(command, asker, exc)  # rolled back: nothing recorded
        else:
            refusal = Refusal("forbidden", forbidden)
        # Rolled back: nothing changed. The refusal is recorded (who tried what) and is the
        # first answer a retry gets.
        reply = self._refused(command.name, asker.request_id, refusal.kind, refusal.reason)
        inserted = await conn.fetchval(
            "INSERT INTO operator_requests (request_id, identity, command, digest, request,"
            " outcome, reason, reply) VALUES ($1, $2, $3, $4, $5::jsonb, 'refused', $6, $7)"
            " ON CONFLICT (request_id) DO NOTHING RETURNING true",
            asker.request_id,
            asker.identity,
            command.name,
            fingerprint,
            request,
            refusal.reason,
            reply.data,
        )
        log.info("%s refused %s: %s", asker.identity, command.name, refusal.reason)
        if not inserted:
            return await self._again(conn, command, asker, fingerprint)
        return reply

    async def _settled(
        self, conn: Conn, command: Command[Any], answer: EventData, asker: Asker, reply: Reply
    ) -> Reply:
        """The committed write's reply, or its outcome when the command has a ``settle``."""
        if command.settle is None:
            return reply
        # Committed: whatever carries it out now sees it. Its outcome is the reply; should
        # settling fail, the committed answer stands (the write is done either way).
        try:
            settled = self._answered(await command.settle(conn, answer, asker), asker)
        except Exception:
            log.exception("%s %s: settling failed", self._service, command.name)
            return reply
        await conn.execute(
            "UPDATE operator_requests SET reply = $2 WHERE request_id = $1",
            asker.request_id,
            settled.data,
        )
        return settled

    async def _again(
        self, conn: Conn, command: Command[Any], asker: Asker, fingerprint: str
    ) -> Reply:
        """A request id seen before: its first reply when it is the same request."""
        row = await conn.fetchrow(
            "SELECT identity, command, digest, reply, reason FROM operator_requests"
            " WHERE request_id = $1",
            asker.request_id,
        )
        if row is None:  # pragma: no cover - the conflict said it exists
            return self._refused(command.name, asker.request_id, "failed", "ask again")
        if (row["identity"], row["command"], row["digest"]) != (
            asker.identity,
            command.name,
            fingerprint,
        ):
            return self._refused(
                command.name,
                asker.request_id,
                "invalid",
                f"request id {asker.request_id} was already used for another request; "
                "nothing done (each request needs its own id)",
            )
        return Reply(bytes(row["reply"]), row["reason"])

    def _answered(self, answer: EventData, asker: Asker) -> Reply:
        env = make_envelope(answer, source=self._source, correlation_id=str(asker.request_id))
        return Reply(env.to_json())

    def _failed(self, command: Command[Any], asker: Asker, exc: Exception) -> Reply:
        log.exception("%s %s failed", self._service, command.name, exc_info=exc)
        reason = f"{self._service} could not answer: {type(exc).__name__}: {exc}"
        return self._refused(command.name, asker.request_id, "failed", reason)

    def _refused(
        self, command: str, request_id: uuid.UUID, kind: RefusalKind, reason: str
    ) -> Reply:
        data = OpsRefused(command=command[:128] or "?", kind=kind, reason=reason[:TEXT_MAX])
        env = make_envelope(data, source=self._source, correlation_id=str(request_id))
        return Reply(env.to_json(), data.reason)
