"""One Redfish HTTP exchange with bounded retries (reliability.md 7.D1).

Used by :class:`~lockstep_redfish.session.BmcSession`; callers normally go through a session.

Each attempt is bounded by ``timeout_s`` (connect, headers and body). Timeouts, connection
errors and the retryable statuses 429/500/502/503/504 are retried up to ``retries`` times with
exponential backoff and jitter; a ``Retry-After`` header (DSP0266 "HTTP status codes": 503
and 429 may carry Retry-After; RFC 9110 §10.2.3: delay-seconds or an HTTP-date) lengthens the
wait, capped by ``max_retry_after_s``. Other statuses are returned to the caller.

Messages name the method, URL and problem only: never request bodies or headers, which hold
passwords and ``X-Auth-Token``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from ssl import SSLContext
from typing import Any

import aiohttp
from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload
from multidict import CIMultiDictProxy

from lockstep_common.backoff import Backoff
from lockstep_redfish.errors import RETRYABLE, BmcUnavailable, BmcUntrusted, RedfishReplyError

log = logging.getLogger(__name__)
_JITTER = random.Random()  # noqa: S311 - backoff jitter, not cryptography

Body = bytes | tuple[bytes, ...]
"""A request body: bytes, or pieces sent one after the other as one body (one
``Content-Length``), each object as it is: a multipart push sends the image's own bytes
between its headers and its closing boundary instead of a copy joined into one body."""


class _Pieces(Payload):
    """``Body`` pieces as an aiohttp payload: written in order, never joined."""

    def __init__(self, pieces: tuple[bytes, ...]) -> None:
        super().__init__(pieces)
        self._pieces = pieces
        self._size = sum(map(len, pieces))  # aiohttp sends it as the Content-Length

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._pieces).decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        for piece in self._pieces:
            await writer.write(piece)

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        # aiohttp's writer itself drops what would run past the Content-Length it sent.
        await self.write(writer)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    timeout_s: float = 10.0
    retries: int = 2
    backoff_s: float = 0.5
    max_retry_after_s: float = 30.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (0-based ``attempt`` just failed)."""
        backoff = Backoff(self.backoff_s, jitter=0.5, rng=_JITTER).delay(attempt)
        if retry_after is None:
            return backoff
        return max(backoff, min(retry_after, self.max_retry_after_s))


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: CIMultiDictProxy[str]
    body: Any  # decoded JSON, or None for an empty body


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds from now (RFC 9110 §10.2.3); None when absent or invalid."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


async def _decode(response: aiohttp.ClientResponse, url: str) -> Any:
    raw = await response.read()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RedfishReplyError(url, "body", "not valid JSON") from None


async def request(
    http: aiohttp.ClientSession,
    method: str,
    url: str,
    policy: RetryPolicy,
    *,
    ssl: bool | SSLContext,
    headers: dict[str, str] | None = None,
    json_body: dict[str, Any] | None = None,
    data: Body | None = None,
    retries: int | None = None,
    timeout_s: float | None = None,
    slots: asyncio.Semaphore | None = None,
) -> Reply:
    """``method url`` with retries; raises :class:`BmcUnavailable` when every attempt failed.

    ``slots`` (one per client, e.g. per sweep: the requests in flight across all BMCs) is
    held during each attempt, so requests queue on it in FIFO order. With one pool per sweep
    this replaced aiohttp's connector queue, whose wake-up scan is linear in the number of
    waiting hosts (measured: 4x client CPU at 256 BMCs in flight); each BMC now has its own
    small pool and ``slots`` is the only global bound. Without ``slots`` nothing is shared.

    ``timeout_s`` overrides ``policy.timeout_s`` for each attempt (a push of a large image).
    ``data`` is a prepared body (its ``Content-Type`` in ``headers``), e.g. a multipart push,
    or its pieces (:data:`Body`).
    The error's ``status`` and ``retry_after`` are the last attempt's (None: no answer) and its
    ``sent`` is False only when no attempt got as far as an open connection, so the BMC saw
    nothing: what makes a non-idempotent request (a firmware push) safe to send again.
    """
    slots = slots or asyncio.Semaphore(1)
    attempts = (policy.retries if retries is None else retries) + 1
    limit = policy.timeout_s if timeout_s is None else timeout_s
    problem = "not attempted"
    reached = False  # some attempt opened a connection: the BMC may have seen the request
    status: int | None = None
    hint: float | None = None
    for attempt in range(attempts):
        hint, status = None, None
        try:
            async with (
                slots,
                asyncio.timeout(limit),
                # No redirects: a BMC answering 3xx would have the login body (its password)
                # or the session token resent to wherever it points, plain http included.
                # Redfish services do not redirect (DSP0266); a 3xx is an unexpected status.
                http.request(
                    method,
                    url,
                    headers=headers,
                    json=json_body,
                    data=_Pieces(data) if isinstance(data, tuple) else data,
                    ssl=ssl,
                    allow_redirects=False,
                ) as response,
            ):
                if response.status not in RETRYABLE:
                    return Reply(response.status, response.headers, await _decode(response, url))
                problem, status, reached = f"HTTP {response.status}", response.status, True
                hint = retry_after_seconds(response.headers.get("Retry-After"))
        except TimeoutError:
            reached = True  # the timeout may have struck after the request was sent
            problem = f"no answer within {limit:g}s"
        except aiohttp.ClientConnectorCertificateError as exc:
            raise BmcUntrusted(
                f"{method} {url}: TLS certificate not trusted ({exc.certificate_error})", url=url
            ) from None
        except aiohttp.ClientConnectorError as exc:
            problem = f"connection failed ({type(exc).__name__})"  # nothing was sent
        except aiohttp.ClientError as exc:
            reached = True
            problem = f"connection failed ({type(exc).__name__})"
        if attempt + 1 < attempts:
            delay = policy.delay(attempt, hint)
            log.debug("%s %s: %s; retry %d in %.2fs", method, url, problem, attempt + 1, delay)
            await asyncio.sleep(delay)
    message = f"{method} {url}: {problem} (after {attempts} attempts)"
    raise BmcUnavailable(message, url=url, status=status, retry_after=hint, sent=reached)
