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
"""

from __future__ import annotations

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
    """


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
    transient for the same reasons as in :class:`BmcUnavailable`; every other status is the
    BMC refusing (:class:`BmcRefused`).
    """
    message = f"{method} {url}: HTTP {status}"
    if status == 401 or status in RETRYABLE:
        return BmcUnavailable(message, url=url, status=status)
    return BmcRefused(message, url=url, status=status)
