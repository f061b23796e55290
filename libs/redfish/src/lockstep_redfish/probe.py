"""What a BMC is, read with GETs only: which profile it matches, how it would be flashed, and what
preflight would refuse (``lockstep bmc probe``, an SRE's first command on new hardware).

Nothing is written: the service root is read without credentials (DSP0266 "Service root"), then
one login (a session where the root offers one, else HTTP Basic, which ``session`` allows only
over verified TLS), GETs of ``UpdateService``, the ``Manager`` collection, every
``FirmwareInventory`` member (in one request where the root advertises ``$expand``), the
account's role and the resource the profile's activation resets (its ``Reset`` action's allowable
``ResetType`` values), and the session's logout. The decisions are the pure ones the updater
makes (``selection``, ``preflight.profile_refusals``, ``privileges``: the privileges the
profile's calls need, DSP8011) and the same reset check (``FirmwareUpdate.reset_action``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lockstep_common.vocabulary import Component
from lockstep_redfish.accounts import AccountUnknown, session_roles
from lockstep_redfish.errors import BmcError, BmcUnavailable, RedfishReplyError, UpdateRefused
from lockstep_redfish.expand import EXPAND, offers_expand, split_members
from lockstep_redfish.preflight import Intent, profile_refusals, push_method
from lockstep_redfish.privileges import needed_privileges
from lockstep_redfish.profile import (
    BmcProfile,
    DowngradeMode,
    LoginMethod,
    PushMethod,
    ResetKind,
    profile_named,
)
from lockstep_redfish.selection import BmcFacts, Selection, facts_from, map_member, select_profile
from lockstep_redfish.session import BmcSession, BmcTarget, RedfishClient
from lockstep_redfish.tasks import Requester
from lockstep_redfish.update import FirmwareUpdate, UpdatePolicy

log = logging.getLogger(__name__)
UPDATE_SERVICE = "/redfish/v1/UpdateService"
MANAGERS = "/redfish/v1/Managers"
FIRMWARE = "/redfish/v1/UpdateService/FirmwareInventory"
PUSH_URI = {
    PushMethod.MULTIPART: "MultipartHttpPushUri",
    PushMethod.HTTP_PUSH: "HttpPushUri",
}


@dataclass(frozen=True, slots=True)
class ProbeReport:
    """What ``probe`` found; ``refusals`` empty: preflight would let the BMC be flashed."""

    bmc: str
    profile: str
    because: tuple[str, ...]
    candidates: tuple[str, ...]
    login: str
    push: str | None
    push_uri: str | None
    apply_time: str
    targets: dict[str, list[str]]  # component -> member ids
    activation: str
    taskless: str
    downgrade: str
    bank: str
    min_gap_s: float
    # The privileges the profile's calls need (DSP8011), each with those calls; what the
    # account holds (None: the BMC does not say).
    privileges_needed: dict[str, list[str]]
    privileges_held: list[str] | None
    refusals: list[str]

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


async def document(bmc: BmcSession, path: str) -> dict[str, Any] | None:
    """``path`` as a JSON object; None when the BMC has no such resource or refuses it. A BMC
    that does not answer is not a BMC without the resource: :class:`BmcUnavailable` goes on
    (the updater's preflight retries it rather than refusing a component it did not read)."""
    try:
        body = (await bmc.get(path)).body
    except BmcUnavailable:
        raise
    except BmcError:
        return None
    return body if isinstance(body, dict) else None


def _ids(collection: dict[str, Any] | None) -> list[str]:
    members = (collection or {}).get("Members")
    items = members if isinstance(members, list) else []
    return [
        m["@odata.id"] for m in items if isinstance(m, dict) and isinstance(m.get("@odata.id"), str)
    ]


def member_ids(collection: dict[str, Any] | None) -> list[str]:
    """The ids (last path segments) of a collection's members, as read by :func:`document`."""
    return [path.rstrip("/").rsplit("/", 1)[-1] for path in _ids(collection)]


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


async def read_facts(bmc: BmcSession, root: dict[str, Any]) -> BmcFacts:
    """What the BMC says about itself (GETs only). The ``FirmwareInventory`` is read in one
    request where the root advertises ``$expand`` (``lockstep_redfish.expand``), else member
    by member."""
    service = await document(bmc, UPDATE_SERVICE)
    managers = member_ids(await document(bmc, MANAGERS))
    members = await firmware_members(bmc, expand=offers_expand(root))
    facts = facts_from(root, service, managers, members.values())
    return dataclasses.replace(facts, documents=members)


async def firmware_members(bmc: BmcSession, *, expand: bool) -> dict[str, dict[str, Any]]:
    """Every ``FirmwareInventory`` member's document by its path, in the order listed (one
    that cannot be read is left out, ``document``). ``expand``: in one
    request, the members the BMC left as links read with their own GET; an expanded answer
    that is not one (``expand.split_members``) or refused is read again member by member."""
    if expand:
        body = await document(bmc, FIRMWARE + EXPAND)
        try:
            docs, links = split_members(body, bmc.url(FIRMWARE + EXPAND))
        except RedfishReplyError as exc:
            log.warning("%s: reading member by member: %s", bmc.url(FIRMWARE), exc)
        else:
            for path in links:
                if (doc := await document(bmc, path)) is not None:
                    docs[path] = doc
            return {path: docs[path] for path in _listed(body) if path in docs}
    listed = dict.fromkeys(p.rstrip("/") for p in _ids(await document(bmc, FIRMWARE)))
    return {path: doc for path in listed if (doc := await document(bmc, path))}


def _listed(body: Any) -> list[str]:
    """The member paths of a collection answer already checked by ``split_members``."""
    return list(dict.fromkeys(str(m["@odata.id"]).rstrip("/") for m in body["Members"]))


async def account_privileges(bmc: BmcSession, username: str) -> frozenset[str] | None:
    """The privileges of the account ``bmc`` is logged in as (``accounts.session_roles``, the
    updater's reading); None when the BMC does not say."""
    try:
        _, privileges = await session_roles(bmc, username)
    except (AccountUnknown, BmcError):
        return None
    return privileges


def _activation(profile: BmcProfile) -> str:
    act = profile.activation
    if act.reset.value == "none":
        return f"OperationApplyTime {act.apply_time}; the image runs once written"
    action = {"system": "ComputerSystem", "manager": "Manager", "chassis": "Chassis"}[act.reset]
    reset = f"{action}.Reset {act.reset_type} of {act.resource}"
    return f"OperationApplyTime {act.apply_time}, then {reset}"


async def reset_refusals(
    bmc: Requester, profile: BmcProfile, policy: UpdatePolicy | None = None
) -> list[str]:
    """Whether the BMC takes the profile's activation reset (GETs only): the ``Reset`` action
    on each resource ``[activation] resource`` names, allowing its ``reset_type``
    (``FirmwareUpdate.reset_action``, which refuses the reset the updater would send); one line
    each, without the head naming the BMC and the profile."""
    act = profile.activation
    if act.reset is ResetKind.NONE or act.resource is None or act.reset_type is None:
        return []
    what = f"the profile's activation reset ({act.reset} {act.reset_type})"
    update = FirmwareUpdate(bmc, policy)
    try:
        paths = await update.resources(act.resource)
        for path in paths:
            await update.reset_action(path, act.reset_type)
    except BmcUnavailable:
        raise
    except UpdateRefused as exc:
        return [f"{what}: {exc}"]
    except BmcError as exc:  # named by the profile, absent here (HTTP 404) or unreadable
        status = exc.context.get("status")
        return [f"{what}: {act.resource} cannot be read ({f'HTTP {status}' if status else exc})"]
    return [] if paths else [f"{what}: the BMC has no {act.resource}"]


def report(
    bmc: str,
    selection: Selection,
    facts: BmcFacts,
    *,
    login: LoginMethod,
    privileges: frozenset[str] | None,
    components: Sequence[Component] | None = None,
    resets: Sequence[str] = (),
) -> ProbeReport:
    """The probe's report from what was read (pure); ``resets``: ``reset_refusals``."""
    profile = selection.profile
    targets: dict[str, list[str]] = {}
    for member in facts.members:
        component = map_member(profile, member).component
        if component is not None and (components is None or component in components):
            targets.setdefault(component.value, []).append(member.id)
    wanted = list(components) if components is not None else [Component(c) for c in targets]
    refusals = profile_refusals(
        bmc, selection, facts, [Intent(c) for c in wanted], login=login, privileges=privileges
    )
    refusals += [f"BMC {bmc} (profile {profile.id}): {line}" for line in resets]
    method = push_method(profile, facts.update_service)
    uri = None
    if method is not None and method in PUSH_URI:
        uri = (facts.update_service or {}).get(PUSH_URI[method])
    elif method is PushMethod.SIMPLE_UPDATE:
        uri = "#UpdateService.SimpleUpdate (the BMC pulls from the updater's image server)"
    force = profile.downgrade.force_parameter
    bank = profile.bank
    return ProbeReport(
        bmc=bmc,
        profile=profile.id,
        because=selection.because,
        candidates=selection.candidates,
        login=login.value,
        push=None if method is None else method.value,
        push_uri=uri if isinstance(uri, str) else None,
        apply_time=profile.activation.apply_time,
        targets={c: sorted(ids) for c, ids in sorted(targets.items())},
        activation=_activation(profile),
        taskless=f"{profile.taskless.meaning}: read back for up to {profile.taskless.wait_s:g}s",
        downgrade=(
            f"{force}, only under a signed rollback approval"
            if force
            else "sent as any update (the standard has no force flag), only under a signed "
            "rollback approval; the read-back decides"
            if profile.downgrade.mode is DowngradeMode.AS_UPDATE
            else "refused: the profile allows none"
        ),
        bank=bank.kind.value
        + (f" ({bank.action})" if bank.action else "")
        + (f" ({', '.join(bank.inactive_members)})" if bank.inactive_members else ""),
        min_gap_s=profile.push.min_gap_s,
        privileges_needed={p: list(c) for p, c in sorted(needed_privileges(profile).items())},
        privileges_held=None if privileges is None else sorted(privileges),
        refusals=refusals,
    )


async def probe(
    client: RedfishClient,
    target: BmcTarget,
    *,
    profile_id: str | None = None,
    components: Sequence[Component] | None = None,
) -> ProbeReport:
    """Read ``target`` and report (module docstring); ``profile_id`` overrides the choice."""
    root = await client.service_root(target)
    links = root.get("Links")
    sessions = "SessionService" in root or (isinstance(links, dict) and "Sessions" in links)
    login = LoginMethod.SESSION if sessions else LoginMethod.BASIC
    target = dataclasses.replace(target, login=login)
    username, _ = client.credentials.get(target.node_id)
    async with client.session(target) as bmc:
        facts = await read_facts(bmc, root)
        privileges = await account_privileges(bmc, username)
        if profile_id is not None:
            selection = Selection(profile_named(profile_id), ("named by the operator",), ())
        else:
            selection = select_profile(facts)
        resets = await reset_refusals(bmc, selection.profile)
    return report(
        target.node_id,
        selection,
        facts,
        login=login,
        privileges=privileges,
        components=components,
        resets=resets,
    )
