"""Reading one BMC's firmware inventory inside a Redfish session (used by ``sweeper``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import aiohttp

from lockstep_inventory.adapters.credentials import CredentialError, CredentialSource
from lockstep_inventory.adapters.redfish_http import BmcError, Reply, RetryPolicy, request
from lockstep_inventory.adapters.redfish_model import (
    ODataRef,
    RedfishReplyError,
    ServiceRoot,
    SessionReply,
    SoftwareInventory,
    collection_members,
    is_reference,
    parse,
    parse_inventory,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
ROOT = "/redfish/v1/"
SESSIONS = "/redfish/v1/SessionService/Sessions"  # DSP0266 §13.3: fixed URI of the collection
FIRMWARE = "/redfish/v1/UpdateService/FirmwareInventory"
EXPAND = "?$expand=.($levels=1)"  # DSP0266 "Query parameters": members only, one level
HEADERS = {"Accept": "application/json", "OData-Version": "4.0"}  # DSP0266 "Request headers"


@dataclass(frozen=True, slots=True)
class BmcTarget:
    """A BMC to sweep. ``url`` is ``scheme://host[:port]``; ``verify_tls`` overrides the sweep
    default for this BMC only (None: use the default)."""

    node_id: str
    url: str
    verify_tls: bool | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError(f"{self.node_id}: BMC url must be http(s)://host[:port]")
        if parts.username is not None or parts.password is not None:
            raise ValueError(f"{self.node_id}: BMC url must not carry credentials")


@dataclass(frozen=True, slots=True)
class SweepResult:
    """One BMC's outcome. ``error`` says what failed and where when ``readable`` is False;
    ``logout_error`` is set when the session could not be deleted."""

    node_id: str
    readable: bool
    members: tuple[SoftwareInventory, ...] = ()
    error: str | None = None
    expanded: bool = False
    logout_error: str | None = None


@dataclass(slots=True)
class _Session:
    base: str
    ssl: bool
    http: aiohttp.ClientSession
    token: str | None = None
    uri: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


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
    """The HTTP client of one BMC visit: at most ``per_bmc`` keep-alive connections, all
    closed when the visit ends. A sweep visits each BMC once, so a connection pool shared by
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


class BmcReader:
    """Reads BMCs, each through its own short-lived ``aiohttp.ClientSession``; ``slots``
    bounds the requests in flight across all of them, logouts excepted."""

    def __init__(
        self,
        credentials: CredentialSource,
        policy: RetryPolicy,
        per_bmc: int,
        verify_tls: bool,
        use_expand: bool | None,
        slots: int,
    ) -> None:
        self._credentials = credentials
        self._policy = policy
        self._per_bmc = per_bmc
        self._verify_tls = verify_tls
        self._use_expand = use_expand
        self._slots = asyncio.Semaphore(slots)
        self._no_cookies = aiohttp.DummyCookieJar()  # needs the running loop: built here

    async def read(
        self, target: BmcTarget, on_read: Callable[[], None] | None = None
    ) -> SweepResult:
        """The target's inventory or an unreadable result; the session is always deleted
        before this returns (also when cancelled). ``on_read`` is called once the inventory
        is read (or reading failed), before the logout: the sweeper uses it to start the next
        BMC while this one's ``DELETE`` is in flight."""
        verify = self._verify_tls if target.verify_tls is None else target.verify_tls
        if not verify and target.url.startswith("https"):
            log.warning("TLS verification is off for %s (%s)", target.node_id, target.url)
        async with _bmc_client(self._per_bmc, self._no_cookies) as http:
            session = _Session(target.url.rstrip("/"), verify, http)
            try:
                result = await self._read(target, session)
            finally:
                if on_read is not None:
                    on_read()
                logout_error = await _despite_cancel(self._logout(target.node_id, session))
        return replace(result, logout_error=logout_error) if logout_error else result

    async def _read(self, target: BmcTarget, session: _Session) -> SweepResult:
        try:
            await _despite_cancel(self._login(target.node_id, session))
            # ServiceRoot is read after the login, on the same connection. Reading it
            # concurrently (DSP0266 lets it be read unauthenticated) saves a round trip but
            # costs a second TCP connection per BMC: measured 15% more client CPU and more
            # server CPU, and a full sweep is CPU-bound on both sides (perf.md section 5).
            reply = await self._get(session, ROOT)
            root = parse(ServiceRoot, reply.body, session.base + ROOT)
            expand = root.supports_expand_levels if self._use_expand is None else self._use_expand
            members = await self._inventory(session, expand)
        except (BmcError, RedfishReplyError, CredentialError) as exc:
            log.warning("BMC %s unreadable: %s", target.node_id, exc)
            return SweepResult(target.node_id, readable=False, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - one BMC's bug must not end the sweep
            log.error("BMC %s unreadable: unexpected %s", target.node_id, type(exc).__name__)
            error = f"unexpected {type(exc).__name__} while reading {session.base}"
            return SweepResult(target.node_id, readable=False, error=error)
        return SweepResult(target.node_id, readable=True, members=members, expanded=expand)

    async def _login(self, node_id: str, session: _Session) -> None:
        """DSP0266 §13.3.4 "Session login": POST UserName/Password, keep ``X-Auth-Token``."""
        username, password = self._credentials.get(node_id)
        url = session.base + SESSIONS
        body = {"UserName": username, "Password": password}
        reply = await request(
            session.http,
            "POST",
            url,
            self._policy,
            ssl=session.ssl,
            slots=self._slots,
            json_body=body,
        )
        if reply.status in {401, 403}:
            raise BmcError(f"POST {url}: authentication failed (HTTP {reply.status})")
        token = reply.headers.get("X-Auth-Token")
        if reply.status not in {200, 201} or not token:
            raise BmcError(f"POST {url}: no session created (HTTP {reply.status})")
        session.token = token
        session.headers = {"X-Auth-Token": token}
        # The session's URI: the Location header, else the body's @odata.id (§13.3.4).
        location = reply.headers.get("Location")
        if location is None and isinstance(reply.body, dict):
            location = parse(SessionReply, reply.body, url).odata_id
        session.uri = self._same_bmc(session, location)

    async def _logout(self, node_id: str, session: _Session) -> str | None:
        """DSP0266 §13.3.4 "Session logout": DELETE the session URI (one retry at most)."""
        if session.token is None:
            return None
        if session.uri is None:
            return f"session on {session.base} has no URI to delete"
        try:
            reply = await request(
                session.http,
                "DELETE",
                session.uri,
                self._policy,
                ssl=session.ssl,
                # No slot: a DELETE still in flight must not keep the next BMC from being
                # read, nor a hanging one stall other logouts. The sweeper bounds logouts
                # (BMCs started and not yet delivered).
                headers=session.headers,
                retries=min(self._policy.retries, 1),
            )
        except (BmcError, RedfishReplyError) as exc:
            log.warning("BMC %s: session not deleted: %s", node_id, exc)
            return str(exc)
        if reply.status not in {200, 202, 204, 404}:  # 404: already gone (expired)
            log.warning("BMC %s: DELETE %s: HTTP %d", node_id, session.uri, reply.status)
            return f"DELETE {session.uri}: HTTP {reply.status}"
        session.token = None
        return None

    @staticmethod
    def _same_bmc(session: _Session, location: str | None) -> str | None:
        """An absolute URI for ``location``, only if it is on this BMC (the token never
        leaves it)."""
        if not location:
            return None
        url = urljoin(session.base + "/", location)
        return url if url.startswith(session.base + "/") else None

    async def _get(self, session: _Session, path: str) -> Reply:
        url = session.base + path
        reply = await request(
            session.http,
            "GET",
            url,
            self._policy,
            ssl=session.ssl,
            slots=self._slots,
            headers=session.headers,
        )
        if reply.status != 200:
            raise BmcError(f"GET {url}: HTTP {reply.status}")
        return reply

    async def _inventory(self, session: _Session, expand: bool) -> tuple[SoftwareInventory, ...]:
        path = FIRMWARE + EXPAND if expand else FIRMWARE
        url = session.base + path
        members = collection_members((await self._get(session, path)).body, url)
        if not any(is_reference(raw) for raw in members):  # expanded: one validation call
            return tuple(parse_inventory(members, url))
        found: dict[int, SoftwareInventory] = {}
        links: dict[int, str] = {}
        for i, raw in enumerate(members):
            if is_reference(raw):  # not expanded (or $expand not used): fetch it below
                links[i] = parse(ODataRef, raw, url, f"Members[{i}]").odata_id
            else:
                found[i] = parse(SoftwareInventory, raw, url, f"Members[{i}]")
        for i, path_i in links.items():
            if not path_i.startswith("/"):
                raise RedfishReplyError(url, f"Members[{i}].@odata.id", "must be a path")
        found.update(await self._members(session, links))
        return tuple(found[i] for i in sorted(found))

    async def _members(
        self, session: _Session, links: dict[int, str]
    ) -> dict[int, SoftwareInventory]:
        """GET each member, at most ``per_bmc`` at once; the first failure cancels the rest."""
        limit = asyncio.Semaphore(self._per_bmc)

        async def one(path: str) -> SoftwareInventory:
            async with limit:
                reply = await self._get(session, path)
            return parse(SoftwareInventory, reply.body, session.base + path)

        try:
            async with asyncio.TaskGroup() as group:
                tasks = {i: group.create_task(one(p)) for i, p in links.items()}
        except ExceptionGroup as group_error:
            raise group_error.exceptions[0] from None
        return {i: t.result() for i, t in tasks.items()}
