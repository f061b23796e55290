"""What can go wrong talking to a BMC, placed in Lockstep's error hierarchy.

Each class is a :class:`~lockstep_common.errors.TransientError` or a
:class:`~lockstep_common.errors.PermanentError`, so a handler that lets one escape gets the right
ack decision from ``disposition_for`` (retry later, or dead-letter at once). Messages name the
method, URL and problem, never a request body, header or secret.

- :class:`BmcUnavailable` (transient): no usable answer once the retries ran out: timeouts,
  connections refused or reset, 429, 500/502/503/504 (with or without ``Retry-After``); and
  401 on a session already open (see :func:`status_error`).
- :class:`BmcRefused` (permanent): the BMC answered and said no: login refused (401/403), no
  session created, any other unexpected status (400, 403, 404, 405, 501, ...).
- :class:`RedfishReplyError` (permanent): a reply that is not what DSP0266 and the schema say
  (not JSON, a wrong type, a missing property).
- :class:`CredentialError` (permanent): no usable credentials for the node (nothing was sent).
- :class:`PlainHttpRefused` (permanent): a BMC reached over plain ``http://`` that is not
  allowed to be (nothing was sent).
- :class:`BmcUntrusted` (permanent): the BMC's TLS certificate failed verification.

The write side (``update``, ``tasks``) adds:

- :class:`ResourceChanged` (transient): ``If-Match`` failed (412): re-read, then decide again.
- :class:`UpdateRefused` (permanent): Lockstep refuses before sending anything (image too
  large, target not updateable, version below ``LowestSupportedVersion``, ...).
- :class:`ImageDigestMismatch` (permanent): the image bytes do not hash to the expected
  SHA-256; nothing was sent.
- :class:`PushOutcomeUnknown` (permanent): a push may or may not have been accepted; it is
  never sent again blindly.
- :class:`TaskFailed`, :class:`TaskDeadlineExceeded` (permanent) and :class:`TaskUnreachable`
  (transient: wait and verify again, never push again).
- :class:`NotVerified` (permanent): the version read back is not the one pushed.
"""

from __future__ import annotations

from typing import Any

from lockstep_common.errors import LockstepError, PermanentError, TransientError

RETRYABLE = frozenset({429, 500, 502, 503, 504})
"""Statuses worth another attempt (DSP0266 "HTTP status codes"; 501 and 505 are not)."""


class BmcError(LockstepError):
    """A BMC that could not be read or written; the message says what failed and where."""


class BmcUnavailable(BmcError, TransientError):
    """No usable answer: retrying later may succeed.

    DSP0266 "HTTP status codes": 503 is "temporary overloading or maintenance" and 429 "too
    many requests", both possibly with ``Retry-After``; 500/502/504 and timeouts or refused /
    reset connections are a BMC rebooting, overloaded or briefly unreachable. They are retried
    within one request (``transport.request``) and raised only once those retries ran out.

    ``status`` and ``retry_after`` are the last answer's (None: no answer); ``sent`` is False
    only when no connection was ever opened, so the BMC cannot have seen the request.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        sent: bool = True,
        **context: Any,
    ) -> None:
        super().__init__(message, status=status, **context)
        self.status = status
        self.retry_after = retry_after
        self.sent = sent


class BmcRefused(BmcError, PermanentError):
    """The BMC answered and refused: the same request will be refused again.

    DSP0266 "HTTP status codes": 401 at login means the credentials are invalid and 403 that
    they lack the privilege; retrying them only counts towards the account's lockout
    threshold (AccountService ``AccountLockoutThreshold``), so an operator must fix the
    secret first. 404 (no such resource), 405 (method not allowed) and 501 (not implemented)
    describe the BMC's firmware, which a retry does not change; 400 describes our request.
    """


class RedfishReplyError(BmcError, PermanentError):
    """A malformed Redfish reply: ``url`` and ``field`` (e.g. ``Members[2].Version``).

    Permanent: a BMC's firmware answers with the same shape every time (a truncated body is a
    connection failure, :class:`BmcUnavailable`, not this).
    """

    def __init__(self, url: str, field: str, problem: str) -> None:
        super().__init__(f"malformed reply from {url}: {field}: {problem}", url=url, field=field)
        self.url = url
        self.field = field
        self.problem = problem


class CredentialError(PermanentError):
    """No usable credentials for a node (the message never contains a secret).

    Permanent: a missing or malformed secret stays so until an operator provides it.
    """


class PlainHttpRefused(BmcError, PermanentError):
    """Credentials would cross the network in clear: a BMC whose URL is ``http://`` and whose
    target does not allow it (``BmcTarget.allow_plain_http``). Nothing is sent, not even a
    connection is opened. DSP0266 §13.3 requires TLS for Basic authentication and session
    creation; only a lab or simulated BMC may be allowed plain http, by its registry entry.

    Permanent: the URL and the allowance are configuration, which a retry does not change.
    """


def status_error(method: str, url: str, status: int) -> BmcError:
    """The error for an unexpected status of an authenticated request (after retries).

    401 inside an open session is transient: the session timed out or the BMC restarted and
    forgot it (DSP0266 "Session lifetime": a session ends after ``SessionTimeout`` without
    requests), so a new session may succeed. 429 and the 5xx retried by ``transport`` are
    transient for the same reasons as in :class:`BmcUnavailable`; so is 412 (an ``If-Match``
    that no longer matches: :class:`ResourceChanged`); every other status is the BMC refusing
    (:class:`BmcRefused`).
    """
    message = f"{method} {url}: HTTP {status}"
    if status == 412:
        return ResourceChanged(f"{message}: changed since it was read (ETag)", url=url, status=412)
    if status == 401 or status in RETRYABLE:
        return BmcUnavailable(message, url=url, status=status)
    return BmcRefused(message, url=url, status=status)


class BmcUntrusted(BmcError, PermanentError):
    """The BMC's TLS certificate failed verification (design.md non-negotiable 8: verified
    unless a per-BMC setting says otherwise). Permanent: the certificate or the trust store
    must change first."""


class ResourceChanged(BmcError, TransientError):
    """412 PreconditionFailed: the resource changed since the ETag sent in ``If-Match`` was
    read (DSP0266 "ETags"). Transient: a fresh read gives a fresh ETag, and with it a fresh
    decision."""


class UpdateRefused(BmcError, PermanentError):
    """Lockstep refuses an update before sending anything: the image is larger than
    ``MaxImageSizeBytes``, a target is not ``Updateable`` or is ``WriteProtected``, the version
    is below a target's ``LowestSupportedVersion`` (or cannot be ordered against it), the
    apply time or ``Stage`` is not offered, or no update method is."""


class ImageDigestMismatch(PermanentError):
    """The image bytes do not hash to the SHA-256 the attested manifest gives: nothing is sent
    (design.md non-negotiable 7: fail closed on provenance)."""


class PushOutcomeUnknown(BmcError, PermanentError):
    """A push that may have been accepted (no answer after the body was sent, or 502/504 from
    a gateway). Permanent on purpose: sending it again could flash twice; read the task list
    and the inventory first."""


class TaskFailed(BmcError, PermanentError):
    """The task ended in a failure state (``Exception``, ``Cancelled``, ...) or the task
    monitor returned an error; the message carries the task's last messages."""


class TaskDeadlineExceeded(BmcError, PermanentError):
    """The task was still running when its deadline passed (a stuck task, reliability.md 7.D3).
    It is left alone (cancelling a flash mid-write risks the device); the caller decides."""


class TaskUnreachable(BmcUnavailable):
    """The BMC stayed unreachable longer than the bound while a task ran (it rebooted,
    reliability.md 7.D2). The update was accepted: wait and verify later, never push again."""


class NotVerified(BmcError, PermanentError):
    """The version read back after an update is not the one pushed: unchanged, a silent
    downgrade, another version, or none (the device stopped answering). Success is the
    version read back, never the task state (design.md non-negotiable 4)."""
