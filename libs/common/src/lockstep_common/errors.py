"""The error hierarchy, and the one place that turns an error into an ack decision.

Transient errors are worth retrying (a database that is restarting, a BMC timing out); they are
negatively acknowledged with a delay and redelivered until the consumer's ``max_deliver`` runs
out. Permanent errors will fail the same way every time (a malformed message, a broken
invariant); they are terminated at once and recorded in the dead-letter table with the reason.
Anything not in this hierarchy is a bug; it is treated as transient so that a deploy of the fix
can still process the message, and it reaches the dead-letter path when deliveries run out.
Errors of other libraries join the hierarchy by subclassing, e.g. ``lockstep_redfish.errors``
(a BMC timing out is transient, a BMC refusing the credentials permanent).
"""

from __future__ import annotations

import enum
from typing import Any


class LockstepError(Exception):
    """Base of every error Lockstep raises on purpose.

    Args:
        message: what went wrong, naming the offending thing.
        **context: structured fields (``node_id``, ``component``, ...) kept for logs and DLQ rows.
    """

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __str__(self) -> str:
        return self.message


class TransientError(LockstepError):
    """Retrying later may succeed: nak with backoff."""


class PermanentError(LockstepError):
    """Retrying will fail the same way: terminate and dead-letter."""


class InvalidMessage(PermanentError):
    """A message could not be decoded or validated (malformed, oversized, unknown type/version)."""


class ConfigurationError(LockstepError):
    """Settings or live infrastructure disagree with what the code requires; refuse to start."""


class TopologyMismatch(ConfigurationError):
    """A JetStream stream or consumer exists with a configuration other than the declared one."""


class MigrationError(ConfigurationError):
    """A recorded migration differs from the file shipped with the code, or failed to apply."""


# Database errors a retry repeats exactly (ISO/IEC 9075, PostgreSQL Appendix A): class 22, data
# exception (a NUL byte in text, a number out of range, bad encoding), and of class 23 the
# violations that the message meets on every delivery: not-null (23502), check (23514) and
# unique (23505). Retrying only delays the dead letter and holds up the consumer. A unique
# violation is not a race here: what two replicas may both insert (the inbox claim, the state
# rows a handler upserts, the outbox) is written with ON CONFLICT, and a handler locks its rows
# first, so a unique violation that reaches the consumer is this message's own (an id it carries
# that is already taken), and docs/architecture.md promises it is dead-lettered at once. A
# foreign-key violation (23503) can be an event that arrived before the one it refers to, so it
# stays retryable.
_DETERMINISTIC_SQLSTATE_CLASSES = frozenset({"22"})
_DETERMINISTIC_SQLSTATES = frozenset({"23502", "23505", "23514"})


def is_permanent(error: BaseException) -> bool:
    """True when retrying cannot help: a ``PermanentError``, or a database error of a class
    that a retry repeats (asyncpg errors carry the server's ``sqlstate``)."""
    if isinstance(error, PermanentError):
        return True
    sqlstate = getattr(error, "sqlstate", None)
    if not isinstance(sqlstate, str):
        return False
    return sqlstate[:2] in _DETERMINISTIC_SQLSTATE_CLASSES or sqlstate in _DETERMINISTIC_SQLSTATES


class Disposition(enum.StrEnum):
    """What the consumer runtime does with a message after its handler ran."""

    ACK = "ack"
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"


def disposition_for(error: BaseException | None, *, delivery: int, max_deliver: int) -> Disposition:
    """Decide the fate of a message: the single home of the ack policy.

    Args:
        error: what the handler raised, or None when it succeeded.
        delivery: this delivery's number, starting at 1 (JetStream's ``num_delivered``).
        max_deliver: the consumer's finite delivery limit.

    Returns:
        ACK on success; DEAD_LETTER for permanent errors (``is_permanent``) and for retryable
        ones on the last delivery (so that the reason is recorded by us rather than lost to an
        advisory); RETRY otherwise.
    """
    if error is None:
        return Disposition.ACK
    if is_permanent(error):
        return Disposition.DEAD_LETTER
    if delivery >= max_deliver:
        return Disposition.DEAD_LETTER
    return Disposition.RETRY


def retry_delay(delivery: int, backoff: tuple[float, ...]) -> float:
    """Seconds to wait before the next delivery after ``delivery`` failed transiently.

    This is the wait to observe, not the ``-NAK`` delay to send: with a consumer ``BackOff`` the
    server adds ``BackOff[min(n-1, len-1)] - BackOff[0]`` to a nak's delay, which
    ``topology.ConsumerSpec.nak_delay`` takes off (docs/architecture.md, retry timing).
    """
    if not backoff:
        return 0.0
    return backoff[min(delivery, len(backoff)) - 1]


def describe(error: BaseException) -> str:
    """An error's message for a log line or a reason: never empty (a bare ``TimeoutError()``
    or ``ConnectionResetError()`` has no text, and "failed: " tells an operator nothing)."""
    return str(error) or type(error).__name__


def error_kind(error: BaseException) -> str:
    """A short, stable name for an error, stored with dead letters and used as a metric label."""
    return type(error).__name__
