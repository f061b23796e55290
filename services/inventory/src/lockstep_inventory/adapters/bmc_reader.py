"""Reading one BMC's firmware inventory inside a Redfish session (used by ``sweeper``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import aiohttp

from lockstep_inventory.adapters.credentials import CredentialError, CredentialSource
from lockstep_inventory.adapters.redfish_http import BmcError, Reply, RetryPolicy, request
from lockstep_inventory.adapters.redfish_model import (
    Collection,
    ODataRef,
    RedfishReplyError,
    ServiceRoot,
    SessionReply,
    SoftwareInventory,
    is_reference,
    parse,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
ROOT = "/redfish/v1/"
SESSIONS = "/redfish/v1/SessionService/Sessions"  # DSP0266 §13.3: fixed URI of the collection
FIRMWARE = "/redfish/v1/UpdateService/FirmwareInventory"
EXPAND = "?$expand=.($levels=1)"  # DSP0266 "Query parameters": members only, one level


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


class BmcReader:
    """Reads BMCs through one shared ``aiohttp.ClientSession``."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        credentials: CredentialSource,
        policy: RetryPolicy,
        per_bmc: int,
        verify_tls: bool,
        use_expand: bool | None,
        slots: int,
    ) -> None:
        self._http = http
        self._credentials = credentials
        self._policy = policy
        self._per_bmc = per_bmc
        self._verify_tls = verify_tls
        self._use_expand = use_expand
        self._slots = asyncio.Semaphore(slots)

    async def read(self, target: BmcTarget) -> SweepResult:
        """The target's inventory or an unreadable result; the session is always deleted."""
        verify = self._verify_tls if target.verify_tls is None else target.verify_tls
        if not verify and target.url.startswith("https"):
            log.warning("TLS verification is off for %s (%s)", target.node_id, target.url)
        session = _Session(target.url.rstrip("/"), ssl=verify)
        try:
            result = await self._read(target, session)
        finally:
            logout_error = await _despite_cancel(self._logout(target.node_id, session))
        return replace(result, logout_error=logout_error) if logout_error else result

    async def _read(self, target: BmcTarget, session: _Session) -> SweepResult:
        try:
            await _despite_cancel(self._login(target.node_id, session))
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
            self._http,
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
                self._http,
                "DELETE",
                session.uri,
                self._policy,
                ssl=session.ssl,
                slots=self._slots,
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
            self._http,
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
        collection = parse(Collection, (await self._get(session, path)).body, url)
        found: dict[int, SoftwareInventory] = {}
        links: dict[int, str] = {}
        for i, raw in enumerate(collection.Members):
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
