"""Operator commands asked of the service that owns them, over the bus (no database).

``ask`` publishes a typed request on ``ops.<identity>.<service>.<command>``, the identity being
the one this process connects as (the server lets it publish there and nowhere else under
``ops.``), and returns the command's typed answer. The service's ``ops.refused`` becomes one
line and an exit code (``fail``): 2 for what the operator can fix (bad input, an unknown node,
a command this identity may not run), 1 for a conflict with the current state or when the
service could not answer. No answer is exit 3.

A request that gets no reply in time is sent again once with the same request id: a write the
service already ran answers with its first reply and is not run twice
(``lockstep_common.operator``). Uses the standard-library client (``nats_request``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from lockstep_cli.cli_io import fail

if TYPE_CHECKING:
    from lockstep_common.envelope import EventData
    from lockstep_common.settings import ServiceSettings

A = TypeVar("A", bound="EventData")
MAX_REPLY_BYTES = 64 << 20
ATTEMPTS = 2
MAX_PAGES = 100_000


def identity_of(settings: ServiceSettings) -> str:
    """The identity the server knows this process as (``cli`` on an unauthenticated server)."""
    from lockstep_common.identities import CLI

    return settings.nats_user or CLI


def ask(
    settings: ServiceSettings,
    service: str,
    command: str,
    request: EventData,
    answer: type[A],
    *,
    timeout_s: float = 10.0,
    not_found_exit: int = 2,
    what: str = "",
) -> A:
    """The service's answer to ``request``; exits with one line when there is none (a
    refusal's line starts with ``what:`` when given, e.g. the option it is about)."""
    from rich.markup import escape

    from lockstep_cli import nats_request
    from lockstep_common import subjects
    from lockstep_common.envelope import make_envelope, source_of
    from lockstep_common.errors import InvalidMessage
    from lockstep_common.events import REGISTRY
    from lockstep_common.events.v1 import OpsRefused
    from lockstep_common.subjects import Namespace

    access = settings.nats_access()
    if not nats_request.supported(access):
        fail(f"LOCKSTEP_NATS_URL {settings.nats_url}: operator commands speak nats:// or tls://")
    subject = Namespace(settings.namespace).wire(
        subjects.ops_request(identity_of(settings), service, command)
    )
    body = make_envelope(request, source=source_of("cli")).to_json()
    for attempt in range(ATTEMPTS):
        try:
            reply = nats_request.request(access, subject, body, timeout_s, name="lockstep-cli")
            break
        except nats_request.NoReply:
            if attempt + 1 == ATTEMPTS:
                fail(f"no answer on {subject} within {timeout_s:g}s: is the {service} running?", 3)
        except nats_request.NoResponders:
            fail(f"nobody answers {subject}: is the {service} service running?", 3)
        except nats_request.Refused as exc:
            fail(f"NATS refused {subject}: {escape(str(exc))}", 3)
        except nats_request.AccessError as exc:
            fail(escape(str(exc)))
        except OSError as exc:  # Unreachable included
            fail(f"NATS at {','.join(access.servers)} unreachable: {escape(str(exc))}", 3)
    try:
        data = REGISTRY.decode(reply.data, max_bytes=MAX_REPLY_BYTES).data
    except InvalidMessage as exc:
        fail(f"unexpected reply on {subject}: {escape(str(exc))}", 1)
    if isinstance(data, OpsRefused):
        codes = {"failed": 1, "conflict": 1, "not_found": not_found_exit}
        # The service's text, not markup: "[red]" in a name the operator typed is printed.
        line = f"{what}: {data.reason}" if what else data.reason
        fail(escape(line), codes.get(data.kind, 2))
    if not isinstance(data, answer):
        fail(f"unexpected reply on {subject}: {type(data).__name__}", 1)
    return data


P = TypeVar("P", bound="EventData")


def pages(
    settings: ServiceSettings,
    service: str,
    command: str,
    request: Callable[[str | None], EventData],
    answer: type[P],
    next_after: Callable[[P], str | None],
) -> Iterator[P]:
    """Every page of a paged command: ``request(after)`` until the answer's cursor is None."""
    after: str | None = None
    for _ in range(MAX_PAGES):
        page = ask(settings, service, command, request(after), answer)
        yield page
        after = next_after(page)
        if after is None:
            return
    fail(f"{service} {command}: the pages did not end after {MAX_PAGES}", 1)
