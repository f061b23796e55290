"""What ``lockstep fleet pin|admit`` send over NATS, and the validation that comes first.

Everything an operator types is checked before anything is published: a bad stack file or
selector changes nothing. Pins go to JetStream (``pin.changed.<site>``) with ``Nats-Msg-Id`` =
the envelope id, and each PubAck is awaited so that a lost pin is an error, not a silence.
Admission checks are core-NATS request/reply, as a scheduler's prolog asks them.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import nats
import yaml
from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from pydantic import ValidationError

from lockstep_common import canonical, subjects
from lockstep_common.envelope import Envelope, make_envelope, source_of
from lockstep_common.errors import InvalidMessage
from lockstep_common.events import REGISTRY
from lockstep_common.events.v1 import (
    AdmissionCheckAnswered,
    AdmissionCheckRequested,
    PinChanged,
    ScopeSelector,
)
from lockstep_common.natsconn import AccessError, NatsAccess, connect
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import Component

SOURCE = source_of("cli")
HASH = re.compile(r"[0-9a-f]{64}")
MAX_REPLY_BYTES = 4 << 20  # one verdict per node of a large job


class InputError(ValueError):
    """Operator input that cannot be used; the message names the bad part."""


class Unavailable(RuntimeError):
    """NATS or the service did not answer in time."""


def stack_yaml(stack: Mapping[str, Mapping[Component, str]]) -> str:
    """A stack as the YAML ``parse_stack`` reads back, every version a quoted string."""
    doc = {p: {str(c): v for c, v in sorted(s.items())} for p, s in sorted(stack.items())}
    return yaml.safe_dump(doc, default_style=None, sort_keys=False)


def parse_stack(text: str, where: str) -> dict[str, dict[Component, str]]:
    """A stack file (YAML or JSON): ``{profile: {component: version}}``, versions as strings."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{where}: not YAML or JSON: {exc}") from None
    if not isinstance(doc, dict) or not doc:
        raise InputError(f"{where}: expected a mapping profile -> {{component: version}}")
    stack: dict[str, dict[Component, str]] = {}
    for profile, components in doc.items():
        if not isinstance(profile, str) or not isinstance(components, dict) or not components:
            raise InputError(f"{where}: {profile!r}: expected a profile name mapping components")
        pinned: dict[Component, str] = {}
        for key, version in components.items():
            try:
                component = Component(key)
            except ValueError:
                names = ", ".join(c.value for c in Component)
                raise InputError(
                    f"{where}: {profile}.{key}: not a Lockstep component (use {names})"
                ) from None
            # YAML reads 12.10 as the float 12.1: refuse rather than pin a mangled version.
            if not isinstance(version, str) or not version.strip():
                raise InputError(
                    f"{where}: {profile}.{key}: version must be a non-empty string "
                    f"(got {version!r}; quote it in YAML)"
                )
            pinned[component] = version
        stack[profile] = pinned
    return stack


@dataclass(frozen=True, slots=True)
class PinMessage:
    """One pin, ready to publish."""

    site: str
    subject: str
    envelope: Envelope[PinChanged]


def pins_for(
    namespace: str,
    selector: ScopeSelector,
    stack: Mapping[str, Mapping[Component, str]],
    rollout_id: str | None,
) -> tuple[str, list[PinMessage]]:
    """The stack hash and one PinChanged per site of ``selector`` (validated, not sent)."""
    if not selector.sites:
        raise InputError("--scope must name at least one site (site=NAME): pins are per site")
    stack_hash = canonical.stack_hash(stack)
    ns = Namespace(namespace)
    out = []
    for site in dict.fromkeys(selector.sites):
        try:
            # Each site's pin scopes itself to that site, so that pinning "site=a,site=b" and
            # later "site=a" alone replace the same (site, scope) row in the inventory.
            data = PinChanged(
                site=site,
                scope=selector.model_copy(update={"sites": (site,)}),
                stack_hash=stack_hash,
                stack={p: dict(s) for p, s in stack.items()},
                rollout_id=rollout_id,
            )
            subject = ns.wire(subjects.pin_changed(site))
        except (ValidationError, ValueError) as exc:
            raise InputError(_first_error(exc)) from None
        out.append(PinMessage(site, subject, make_envelope(data, source=SOURCE)))
    return stack_hash, out


async def publish_pins(
    access: NatsAccess, messages: list[PinMessage], timeout_s: float
) -> list[str]:
    """Publish every pin, awaiting each PubAck; the sites published, in order.

    Raises :class:`Unavailable` naming the site that failed and those already published.
    """
    nc = await connect_once(access, timeout_s)
    done: list[str] = []
    try:
        js = nc.jetstream()
        for m in messages:
            try:
                await js.publish(
                    m.subject,
                    m.envelope.to_json(),
                    timeout=timeout_s,
                    headers={"Nats-Msg-Id": str(m.envelope.event_id)},
                )
            except (NatsTimeout, NoRespondersError, nats.errors.Error) as exc:
                already = f" (already published: {', '.join(done)})" if done else ""
                raise Unavailable(
                    f"pin for site {m.site} not acknowledged on {m.subject}: "
                    f"{type(exc).__name__} {exc}; is the inventory service's PINS stream "
                    f"there?{already}"
                ) from None
            done.append(m.site)
    finally:
        await nc.close()
    return done


def admission_request(stack_hash: str, node_ids: list[str]) -> AdmissionCheckRequested:
    """The request, or :class:`InputError` naming what is wrong."""
    if not HASH.fullmatch(stack_hash):
        raise InputError(f"--stack-hash {stack_hash!r}: expected 64 lower-case hex digits")
    if not node_ids:
        raise InputError("--nodes: no nodes given (n1,n2 or repeat --nodes)")
    try:
        return AdmissionCheckRequested(stack_hash=stack_hash, node_ids=tuple(node_ids))
    except ValidationError as exc:
        raise InputError(_first_error(exc)) from None


async def admit(
    access: NatsAccess, namespace: str, request: AdmissionCheckRequested, timeout_s: float
) -> AdmissionCheckAnswered:
    """Ask the inventory; :class:`Unavailable` when nobody answers within ``timeout_s``,
    :class:`InputError` when the service says the request is bad."""
    subject = Namespace(namespace).wire(subjects.admission_check())
    # One deadline for connecting and asking: a prolog's --timeout is the whole wait.
    deadline = time.monotonic() + timeout_s
    nc = await connect_once(access, timeout_s)
    try:
        env = make_envelope(request, source=SOURCE)
        try:
            left = max(0.05, deadline - time.monotonic())
            reply = await nc.request(subject, env.to_json(), timeout=left)
        except (NatsTimeout, NoRespondersError) as exc:
            raise Unavailable(
                f"no answer on {subject} within {timeout_s:g}s ({type(exc).__name__}): "
                "is the inventory service running?"
            ) from None
    finally:
        await nc.close()
    error = _error_of(reply.data, (reply.headers or {}).get("Lockstep-Error"))
    if error is not None:
        raise InputError(f"inventory refused the request: {error}")
    try:
        answer = REGISTRY.decode(reply.data, max_bytes=MAX_REPLY_BYTES).data
    except InvalidMessage as exc:
        raise InputError(f"unexpected reply on {subject}: {exc}") from None
    if not isinstance(answer, AdmissionCheckAnswered):
        raise InputError(f"unexpected reply type on {subject}: {type(answer).__name__}")
    return answer


async def connect_once(access: NatsAccess, timeout_s: float) -> NatsClient:
    # One attempt per server and an overall bound: a CLI (or a prolog) must fail within its
    # timeout, not retry forever (nats-py's max_reconnect_attempts=0 would mean "no limit").
    async def quiet(exc: Exception) -> None:
        return None  # the failure is reported once, below, not as a traceback per attempt

    try:
        return await asyncio.wait_for(
            connect(
                access,
                connect_timeout=max(0.5, min(timeout_s, 5.0)),
                allow_reconnect=False,
                max_reconnect_attempts=1,
                reconnect_time_wait=0.1,
                error_cb=quiet,
                name="lockstep-cli",
            ),
            timeout_s,
        )
    except AccessError as exc:
        raise InputError(str(exc)) from None
    except (OSError, TimeoutError, NatsTimeout, nats.errors.Error) as exc:
        where = ",".join(access.servers)
        raise Unavailable(f"NATS at {where} unreachable: {type(exc).__name__} {exc}") from None


def _error_of(data: bytes, header: str | None) -> str | None:
    """The service's ``{"error": ...}`` reply (header or body), or None for an answer."""
    try:
        body: Any = json.loads(data)
    except ValueError:
        return header
    if isinstance(body, dict) and "error" in body and "type" not in body:
        return str(body["error"])
    return header


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        return f"{where}: {err['msg']}"
    return str(exc)
