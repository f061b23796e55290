"""Reading one BMC's firmware inventory inside a Redfish session (used by ``sweeper``).

The session (login, token, logout, the BMC's own HTTP client, TLS) is ``lockstep_redfish``'s;
this module reads ServiceRoot and ``FirmwareInventory`` (with ``$expand`` when advertised or
asked for, else the collection and each member) and turns the outcome into a
:class:`SweepResult`.

The result names the BMC profile its members are mapped by (``domain.members``), chosen as the
updater's preflight chooses it (``lockstep_redfish.selection.select_profile`` over the service
root, ``UpdateService``, the ``Managers`` collection and the members, ``probe.read_facts``'s
reading), unless the inventory's ``bmc_profiles`` names one for the node. The two extra
documents are read once per node and remembered (:class:`ProfileMemo`, kept across sweeps by
the service) while what the root and the members (ids and versions) say is unchanged: a sweep
of an unchanged fleet costs no request more than before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lockstep_redfish.errors import BmcError, CredentialError, RedfishReplyError
from lockstep_redfish.models import (
    ODataRef,
    ServiceRoot,
    SoftwareInventory,
    collection_members,
    is_reference,
    parse,
    parse_inventory,
)
from lockstep_redfish.probe import document, member_ids
from lockstep_redfish.selection import MemberFacts, facts_from, select_profile
from lockstep_redfish.session import BmcSession, BmcTarget, RedfishClient

log = logging.getLogger(__name__)
ROOT = "/redfish/v1/"
UPDATE_SERVICE = "/redfish/v1/UpdateService"
MANAGERS = "/redfish/v1/Managers"
FIRMWARE = "/redfish/v1/UpdateService/FirmwareInventory"
EXPAND = "?$expand=.($levels=1)"  # DSP0266 "Query parameters": members only, one level


@dataclass(frozen=True, slots=True)
class SweepResult:
    """One BMC's outcome. ``error`` says what failed and where when ``readable`` is False;
    ``logout_error`` is set when the session could not be deleted. ``profile`` is the BMC
    profile the members are mapped by (None: not chosen, ``sweeping.report_of`` says how)."""

    node_id: str
    readable: bool
    members: tuple[SoftwareInventory, ...] = ()
    error: str | None = None
    expanded: bool = False
    logout_error: str | None = None
    profile: str | None = None


def member_facts(member: SoftwareInventory) -> MemberFacts:
    """What a profile's member rows read of one member as swept."""
    doc = {
        "Id": member.Id,
        "SoftwareId": member.SoftwareId,
        "RelatedItem": member.RelatedItem,
        "Oem": member.Oem,
        "Version": member.Version,
    }
    return MemberFacts.from_doc(doc)


Fingerprint = tuple[object, ...]


@dataclass(slots=True)
class ProfileMemo:
    """The profile chosen for each node, with what its root and members said when it was
    chosen: chosen again only when that changes (a member flashed, another BMC at the
    address)."""

    chosen: dict[str, tuple[Fingerprint, str]] = field(default_factory=dict)


def _fingerprint(root: Mapping[str, Any], members: Sequence[SoftwareInventory]) -> Fingerprint:
    oem = root.get("Oem")
    return (
        str(root.get("Vendor")),
        str(root.get("Product")),
        tuple(sorted(oem)) if isinstance(oem, dict) else (),
        # Versions too: a flashed BMC image may change what UpdateService offers.
        tuple(sorted((m.Id, str(m.Version)) for m in members)),
    )


class BmcReader:
    """Reads BMCs' firmware inventories, each in its own session of ``client``."""

    def __init__(
        self,
        client: RedfishClient,
        use_expand: bool | None,
        *,
        named: Mapping[str, str] | None = None,
        memo: ProfileMemo | None = None,
    ) -> None:
        self._client = client
        self._use_expand = use_expand
        self._named = named or {}
        self._memo = memo if memo is not None else ProfileMemo()

    async def read(
        self, target: BmcTarget, on_read: Callable[[], None] | None = None
    ) -> SweepResult:
        """The target's inventory or an unreadable result; the session is always deleted
        before this returns (also when cancelled). ``on_read`` is called once the inventory
        is read (or reading failed), before the logout: the sweeper uses it to start the next
        BMC while this one's ``DELETE`` is in flight."""
        session = self._client.session(target)
        try:
            result = await self._read(target, session)
        finally:
            if on_read is not None:
                on_read()
            await session.close()
        logout_error = session.logout_error
        return replace(result, logout_error=logout_error) if logout_error else result

    async def _read(self, target: BmcTarget, session: BmcSession) -> SweepResult:
        try:
            await session.open()
            # ServiceRoot is read after the login, on the same connection. Reading it
            # concurrently (DSP0266 lets it be read unauthenticated) saves a round trip but
            # costs a second TCP connection per BMC: measured 15% more client CPU and more
            # server CPU, and a full sweep is CPU-bound on both sides (perf.md section 5).
            reply = await session.get(ROOT)
            root = parse(ServiceRoot, reply.body, session.url(ROOT))
            expand = root.supports_expand_levels if self._use_expand is None else self._use_expand
            members = await self._inventory(session, expand)
            profile = await self.choose_profile(target.node_id, session, reply.body, members)
        except (BmcError, CredentialError) as exc:
            log.warning("BMC %s unreadable: %s", target.node_id, exc)
            return SweepResult(target.node_id, readable=False, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - one BMC's bug must not end the sweep
            log.error("BMC %s unreadable: unexpected %s", target.node_id, type(exc).__name__)
            error = f"unexpected {type(exc).__name__} while reading {session.base}"
            return SweepResult(target.node_id, readable=False, error=error)
        return SweepResult(
            target.node_id, readable=True, members=members, expanded=expand, profile=profile
        )

    async def choose_profile(
        self,
        node_id: str,
        session: BmcSession,
        root: Mapping[str, Any],
        members: Sequence[SoftwareInventory],
    ) -> str:
        """The profile named for the node, else the one the selection chooses (remembered)."""
        named = self._named.get(node_id)
        if named is not None:
            return named
        key = _fingerprint(root, members)
        known = self._memo.chosen.get(node_id)
        if known is not None and known[0] == key:
            return known[1]
        # Read as the updater's probe reads them (None where absent or refused).
        service = await document(session, UPDATE_SERVICE)
        managers = member_ids(await document(session, MANAGERS))
        facts = facts_from(root, service, managers, ())
        facts = replace(facts, members=tuple(member_facts(m) for m in members))
        chosen = select_profile(facts).profile.id
        self._memo.chosen[node_id] = (key, chosen)
        return chosen

    async def _inventory(self, session: BmcSession, expand: bool) -> tuple[SoftwareInventory, ...]:
        path = FIRMWARE + EXPAND if expand else FIRMWARE
        url = session.url(path)
        members = collection_members((await session.get(path)).body, url)
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
        self, session: BmcSession, links: dict[int, str]
    ) -> dict[int, SoftwareInventory]:
        """GET each member, at most ``per_bmc`` at once; the first failure cancels the rest."""
        limit = asyncio.Semaphore(self._client.per_bmc)

        async def one(path: str) -> SoftwareInventory:
            async with limit:
                reply = await session.get(path)
            return parse(SoftwareInventory, reply.body, session.url(path))

        try:
            async with asyncio.TaskGroup() as group:
                tasks = {i: group.create_task(one(p)) for i, p in links.items()}
        except ExceptionGroup as group_error:
            raise group_error.exceptions[0] from None
        return {i: t.result() for i, t in tasks.items()}
