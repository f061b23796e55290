"""Authenticated Redfish sessions on BMCs (DSP0266 §13.3 "Session management").

A :class:`RedfishClient` holds what all its sessions share (credentials, retry policy,
connections per BMC, the default TLS verification and a bound on requests in flight across
all BMCs); ``client.session(target)`` is one :class:`BmcSession`::

    async with client.session(BmcTarget("node-1", "https://10.0.0.7")) as bmc:
        root = (await bmc.get("/redfish/v1/")).body

Opening logs in (``POST /redfish/v1/SessionService/Sessions`` -> ``X-Auth-Token`` +
``Location``); every request of the session carries the token; closing deletes the session
(``DELETE`` its URI, DSP0266 §13.3.4), also after errors and on cancellation, and closes the
session's own HTTP client. A BMC whose profile allows HTTP Basic (``BmcTarget.login``; DSP0266
§13.2, for services without a ``SessionService``) gets ``Authorization: Basic`` on every request
instead, and only over TLS whose certificate is verified: anything else is refused before the
credentials are read. A BMC that refuses a session login and offers no ``SessionService`` is
told apart from a wrong password: the error says what the BMC offers. Secrets and tokens
never appear in messages or logs, and never cross the network in clear unless the target allows
plain http (DSP0266 §13.3 requires TLS for session creation); redirects are not followed
(``transport.request``), so a BMC cannot send them elsewhere either.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import ssl
from collections.abc import Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import urljoin, urlsplit

import aiohttp

from lockstep_redfish.credentials import CredentialSource
from lockstep_redfish.errors import (
    BmcError,
    BmcRefused,
    PlainHttpRefused,
    RedfishReplyError,
    status_error,
)
from lockstep_redfish.models import SessionReply, parse
from lockstep_redfish.profile import LoginMethod
from lockstep_redfish.transport import Body, Reply, RetryPolicy, request

log = logging.getLogger(__name__)
T = TypeVar("T")
SESSIONS = "/redfish/v1/SessionService/Sessions"  # DSP0266 §13.3: fixed URI of the collection
SERVICE_ROOT = "/redfish/v1/"  # readable without authentication (DSP0266 "Service root")
BASIC_CHECK = "/redfish/v1/Managers"  # a Basic login is checked on a resource that needs it
HEADERS = {"Accept": "application/json", "OData-Version": "4.0"}  # DSP0266 "Request headers"


@dataclass(frozen=True, slots=True)
class BmcTarget:
    """A BMC. ``url`` is ``scheme://host[:port]``; ``verify_tls`` overrides the client's
    default for this BMC only (None: use the default). An ``http://`` BMC is refused
    (:class:`~lockstep_redfish.errors.PlainHttpRefused`, before anything is sent) unless
    ``allow_plain_http`` says its credentials may cross the network in clear. ``login`` is how
    to authenticate (the BMC profile's choice): a session, or HTTP Basic on every request, which
    is refused unless the URL is https and its certificate is verified."""

    node_id: str
    url: str
    verify_tls: bool | ssl.SSLContext | None = None
    allow_plain_http: bool = False
    login: LoginMethod = LoginMethod.SESSION

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError(f"{self.node_id}: BMC url must be http(s)://host[:port]")
        if parts.username is not None or parts.password is not None:
            raise ValueError(f"{self.node_id}: BMC url must not carry credentials")

    @property
    def plain_http(self) -> bool:
        """True when requests to this BMC, credentials included, would travel unencrypted."""
        return urlsplit(self.url).scheme == "http"


async def _despite_cancel(step: Coroutine[Any, Any, T]) -> T:
    """Run ``step`` to its end even if the caller is cancelled meanwhile, then re-raise the
    cancellation. Used for login (a session the BMC created must be known to be deleted) and
    logout (it must not be cut short); both are bounded by the retry policy."""
    task = asyncio.ensure_future(step)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await task
        raise


def _bmc_client(per_bmc: int, no_cookies: aiohttp.DummyCookieJar) -> aiohttp.ClientSession:
    """The HTTP client of one BMC session: at most ``per_bmc`` keep-alive connections, all
    closed with the session. A sweep visits each BMC once, so a connection pool shared by
    the whole sweep only kept every visited BMC's idle connections open until their
    keep-alive expired (measured: 2,800 idle sockets half-way through a 4,000-BMC sweep, on
    both sides, each an object graph every full garbage collection walks). aiohttp's own
    timeouts are off: ``request`` bounds every attempt with ``timeout_s``."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=per_bmc, limit_per_host=per_bmc),
        headers=HEADERS,
        timeout=aiohttp.ClientTimeout(),
        cookie_jar=no_cookies,  # Redfish sessions use X-Auth-Token; a jar per BMC cost CPU
    )


class RedfishClient:
    """Opens :class:`BmcSession` s. ``slots`` bounds the requests in flight across all of
    them, logouts excepted (None: no bound); each session has its own HTTP client with at
    most ``per_bmc`` connections. TLS certificates are verified unless ``verify_tls`` (the
    default) or ``BmcTarget.verify_tls`` (one BMC) turns it off, which is logged per BMC; an
    ``ssl.SSLContext`` there verifies against that context's trust store."""

    def __init__(
        self,
        credentials: CredentialSource,
        policy: RetryPolicy,
        *,
        per_bmc: int = 2,
        verify_tls: bool | ssl.SSLContext = True,
        slots: int | None = None,
    ) -> None:
        if per_bmc < 1 or (slots is not None and slots < 1):
            raise ValueError("per_bmc and slots must be >= 1")
        self.credentials = credentials
        self.policy = policy
        self.per_bmc = per_bmc
        self.verify_tls = verify_tls
        self.slots = asyncio.Semaphore(slots) if slots is not None else None
        self._no_cookies: aiohttp.DummyCookieJar | None = None  # needs the running loop

    async def service_root(self, target: BmcTarget) -> dict[str, Any]:
        """The service root of ``target``, read without credentials (DSP0266 "Service root":
        the one resource a client reads before authenticating): what the BMC says about itself,
        and whether it offers sessions, before any login."""
        verify = self.verify_tls if target.verify_tls is None else target.verify_tls
        url = target.url.rstrip("/") + SERVICE_ROOT
        http = self._http()
        try:
            reply = await request(http, "GET", url, self.policy, ssl=verify, slots=self.slots)
        finally:
            await http.close()
        if reply.status != 200:
            raise status_error("GET", url, reply.status)
        if not isinstance(reply.body, dict):
            raise RedfishReplyError(url, "(body)", "the service root is not a JSON object")
        return reply.body

    def session(self, target: BmcTarget) -> BmcSession:
        """A session on ``target``, not yet open: ``async with`` it, or ``open()`` and
        ``close()`` it yourself."""
        return BmcSession(self, target)

    def _http(self) -> aiohttp.ClientSession:
        if self._no_cookies is None:
            self._no_cookies = aiohttp.DummyCookieJar()
        return _bmc_client(self.per_bmc, self._no_cookies)


class BmcSession:
    """One Redfish session on one BMC, through its own short-lived HTTP client.

    :meth:`open` logs in; :meth:`request` and :meth:`get` send authenticated requests;
    :meth:`close` deletes the session and never raises for a failed ``DELETE``: it is kept in
    ``logout_error``. Call ``close()`` whatever ``open()`` did (``async with`` does): a login
    that got a token and then failed still leaves a session to delete.
    """

    def __init__(self, client: RedfishClient, target: BmcTarget) -> None:
        self.target = target
        self.base = target.url.rstrip("/")
        self.verify_tls = client.verify_tls if target.verify_tls is None else target.verify_tls
        self.logout_error: str | None = None
        self._client = client
        self._http: aiohttp.ClientSession | None = None
        self._token: str | None = None
        self._uri: str | None = None
        self._auth: dict[str, str] = {}

    def url(self, path: str) -> str:
        """The absolute URL of ``path`` (``/redfish/v1/...``) on this BMC."""
        return self.base + path

    @property
    def uri(self) -> str | None:
        """The open session's path on the BMC (its ``Session`` resource), None before login or
        when the BMC named none."""
        return None if self._uri is None else self._uri.removeprefix(self.base)

    async def __aenter__(self) -> Self:
        try:
            await self.open()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Start the HTTP client and log in; raises :class:`BmcError` or
        :class:`~lockstep_redfish.errors.CredentialError`. The login runs to its end even if
        the caller is cancelled, so that a session the BMC created is known and deleted."""
        if self._http is not None:
            raise RuntimeError(f"session on {self.base} is already open")
        if self.target.plain_http and not self.target.allow_plain_http:
            # Checked before the client exists and the credentials are read: nothing leaves.
            raise PlainHttpRefused(
                f"refusing to send credentials over plain http to {self.base}: use https, or "
                "allow plain http for this BMC explicitly (allow_plain_http)",
                url=self.base,
            )
        if not self.verify_tls and self.base.startswith("https"):
            log.warning("TLS verification is off for %s (%s)", self.target.node_id, self.target.url)
        if self.target.login is LoginMethod.BASIC and (
            self.target.plain_http or self.verify_tls is False
        ):
            how = "plain http" if self.target.plain_http else "TLS without certificate verification"
            raise PlainHttpRefused(
                f"refusing HTTP Basic to {self.base} over {how}: Basic sends the password with "
                "every request, so it is used only over verified TLS (DSP0266 §13.2)",
                url=self.base,
            )
        self._http = self._client._http()
        await _despite_cancel(self._login())

    async def close(self) -> None:
        """Delete the session (if one was created) and close the HTTP client; the logout runs
        to its end even if the caller is cancelled. Never raises for a failed logout."""
        if self._http is None:
            return
        try:
            self.logout_error = await _despite_cancel(self._logout())
        finally:
            http, self._http = self._http, None
            await http.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any] | None = None,
        data: Body | None = None,
        headers: dict[str, str] | None = None,
        retries: int | None = None,
        timeout_s: float | None = None,
    ) -> Reply:
        """``method path`` with the session's token, retried per the client's policy
        (``retries`` overrides its count, ``timeout_s`` its per-attempt bound). Returns
        whatever status the BMC answered last; raises
        :class:`~lockstep_redfish.errors.BmcUnavailable` when no attempt got a usable answer
        and :class:`~lockstep_redfish.errors.RedfishReplyError` for a body that is not JSON.
        ``headers`` are added (e.g. ``If-Match``; ``Content-Type`` of ``data``)."""
        if not path.startswith("/"):
            raise ValueError(f"{path!r}: a path on the BMC must start with '/'")
        return await request(
            self._open_http(),
            method,
            self.url(path),
            self._client.policy,
            ssl=self.verify_tls,
            slots=self._client.slots,
            headers={**self._auth, **headers} if headers else self._auth,
            json_body=json_body,
            data=data,
            retries=retries,
            timeout_s=timeout_s,
        )

    async def get(self, path: str) -> Reply:
        """``GET path``; any status but 200 raises (:func:`~lockstep_redfish.errors.status_error`
        says which kind)."""
        reply = await self.request("GET", path)
        if reply.status != 200:
            raise status_error("GET", self.url(path), reply.status)
        return reply

    async def reopen(self) -> None:
        """Log in again after the BMC forgot the session (401 inside it: it rebooted or the
        session expired, DSP0266 "Session lifetime"). The old token is dropped without a
        ``DELETE``: the BMC no longer knows it."""
        self._open_http()
        self._token, self._uri, self._auth = None, None, {}
        await _despite_cancel(self._login())

    def _open_http(self) -> aiohttp.ClientSession:
        if self._http is None:
            raise RuntimeError(f"session on {self.base} is not open")
        return self._http

    async def _login(self) -> None:
        if self.target.login is LoginMethod.BASIC:
            await self._basic_login()
        else:
            await self._session_login()

    async def _basic_login(self) -> None:
        """DSP0266 §13.2 "HTTP Basic authentication": the credentials go with every request;
        one GET that needs them tells a wrong password now, not at the first write."""
        username, password = self._client.credentials.get(self.target.node_id)
        pair = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
        self._auth = {"Authorization": f"Basic {pair}"}
        url = self.url(BASIC_CHECK)
        reply = await request(
            self._open_http(),
            "GET",
            url,
            self._client.policy,
            ssl=self.verify_tls,
            slots=self._client.slots,
            headers=self._auth,
        )
        if reply.status in {401, 403}:
            self._auth = {}
            raise BmcRefused(
                f"GET {url}: authentication failed (HTTP Basic, HTTP {reply.status})", url=url
            )

    async def _offers(self) -> str | None:
        """What the service root (readable without authentication) says about logging in,
        when it does not offer sessions; None when it offers them or cannot be read."""
        try:
            reply = await request(
                self._open_http(),
                "GET",
                self.url(SERVICE_ROOT),
                self._client.policy,
                ssl=self.verify_tls,
                slots=self._client.slots,
                retries=0,
            )
        except BmcError:
            return None
        root = reply.body if reply.status == 200 and isinstance(reply.body, dict) else None
        if root is None:
            return None
        links = root.get("Links")
        if "SessionService" in root or (isinstance(links, dict) and "Sessions" in links):
            return None
        return (
            "the BMC offers no SessionService (its service root links none), so it takes "
            "HTTP Basic only: use a BMC profile that allows basic login, over verified TLS"
        )

    async def _session_login(self) -> None:
        """DSP0266 §13.3.4 "Session login": POST UserName/Password, keep ``X-Auth-Token``."""
        username, password = self._client.credentials.get(self.target.node_id)
        url = self.url(SESSIONS)
        body = {"UserName": username, "Password": password}
        reply = await request(
            self._open_http(),
            "POST",
            url,
            self._client.policy,
            ssl=self.verify_tls,
            slots=self._client.slots,
            json_body=body,
        )
        if reply.status in {401, 403, 404, 405, 501}:
            # A refused login is not always a wrong password: a BMC without sessions refuses
            # the POST too (401 from its authentication layer, or 404/405).
            offers = await self._offers()
            if offers is not None:
                raise BmcRefused(f"POST {url}: HTTP {reply.status}: {offers}", url=url)
        if reply.status in {401, 403}:
            raise BmcRefused(f"POST {url}: authentication failed (HTTP {reply.status})", url=url)
        token = reply.headers.get("X-Auth-Token")
        if reply.status not in {200, 201} or not token:
            why = "" if reply.status not in {200, 201, 204} else ": the answer has no X-Auth-Token"
            raise BmcRefused(f"POST {url}: no session created (HTTP {reply.status}){why}", url=url)
        self._token = token
        self._auth = {"X-Auth-Token": token}
        # The session's URI: the Location header, else the body's @odata.id (§13.3.4).
        location = reply.headers.get("Location")
        if location is None and isinstance(reply.body, dict):
            location = parse(SessionReply, reply.body, url).odata_id
        self._uri = self._same_bmc(location)

    async def _logout(self) -> str | None:
        """DSP0266 §13.3.4 "Session logout": DELETE the session URI (one retry at most)."""
        if self._token is None:
            return None
        if self._uri is None:
            return f"session on {self.base} has no URI to delete"
        node_id = self.target.node_id
        try:
            reply = await request(
                self._open_http(),
                "DELETE",
                self._uri,
                self._client.policy,
                ssl=self.verify_tls,
                # No slot: a DELETE still in flight must not keep the next BMC from being
                # read, nor a hanging one stall other logouts. Callers bound logouts (the
                # sweeper: BMCs started and not yet delivered).
                headers=self._auth,
                retries=min(self._client.policy.retries, 1),
            )
        except BmcError as exc:
            log.warning("BMC %s: session not deleted: %s", node_id, exc)
            return str(exc)
        if reply.status not in {200, 202, 204, 404}:  # 404: already gone (expired)
            log.warning("BMC %s: DELETE %s: HTTP %d", node_id, self._uri, reply.status)
            return f"DELETE {self._uri}: HTTP {reply.status}"
        self._token = None
        self._auth = {}
        return None

    def _same_bmc(self, location: str | None) -> str | None:
        """An absolute URI for ``location``, only if it is on this BMC (the token never
        leaves it)."""
        if not location:
            return None
        url = urljoin(self.base + "/", location)
        return url if url.startswith(self.base + "/") else None
