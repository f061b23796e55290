"""Which BMC profile a node's BMC speaks, and what it refuses, decided in preflight before anything
is cordoned or written (issue 29 items 1 and 3).

The service root is read without credentials (DSP0266 "Service root"): a root that links no
SessionService takes HTTP Basic, which ``lockstep_redfish.session`` sends only over verified
TLS. Logged in that way, the BMC's ``UpdateService``, ``Manager`` collection and every
``FirmwareInventory`` member (in one request where the root advertises ``$expand``, recorded as
``bmc_expand`` for the later steps' reads) are read (GETs only,
``lockstep_redfish.probe.read_facts``, what ``lockstep bmc probe`` reads) and the profile is
chosen from them (``selection.select_profile``), unless the updater's ``bmc_profiles`` setting
names one for the node's id or its SKU. ``preflight.profile_refusals`` then says, in one line
naming the BMC and the profile, everything that stands in the way: the account's privilege (an
Administrator-class account is refused, reliability.md 7 H5), the login the profile allows, a
component no member holds, a push method the BMC lacks, an image over ``MaxImageSizeBytes``, a
downgrade without a signed rollback approval, and a BMC that does not take the profile's
activation reset (the action missing, or its allowable ``ResetType`` values without the
profile's). The choice and the login are recorded in the progress (``bmc_profile``,
``bmc_login``) for the later steps.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from lockstep_common.events.v1 import FleetNode
from lockstep_common.vocabulary import Component
from lockstep_redfish.accounts import AccountUnknown, session_roles
from lockstep_redfish.errors import BmcError, BmcRefused, BmcUnavailable
from lockstep_redfish.expand import offers_expand
from lockstep_redfish.flip_back import find_inactive
from lockstep_redfish.preflight import Intent, UpdateRequest, profile_refusals, write_refusals
from lockstep_redfish.privileges import account_refusal
from lockstep_redfish.probe import read_facts, reset_refusals
from lockstep_redfish.profile import BmcProfile, LoginMethod, ResetKind, profile_named
from lockstep_redfish.selection import BmcFacts, Selection, members_of, select_profile
from lockstep_redfish.session import BmcSession
from lockstep_redfish.update import FirmwareUpdate, UpdatePolicy, policy_for
from lockstep_updater.domain.progress import FirmwareProgress
from lockstep_updater.domain.steps import NodeStep
from lockstep_updater.steps.bmc_sessions import bmc_target
from lockstep_updater.steps.context import StepContext
from lockstep_updater.steps.ends import Stop

S = NodeStep
log = logging.getLogger(__name__)
FIRMWARE_INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
NAMED = "named by the updater's bmc_profiles setting"


@dataclass(frozen=True, slots=True)
class NodeBmc:
    """What preflight read of the node's BMC and the profile it chose."""

    node_id: str
    selection: Selection
    facts: BmcFacts
    login: LoginMethod
    privileges: frozenset[str] | None

    @property
    def profile(self) -> BmcProfile:
        return self.selection.profile

    def refuse_downgrade(self, intent: Intent, paths: Sequence[str]) -> None:
        """:class:`Stop` (failed, nothing written) where ``intent`` would downgrade one of
        the members ``paths`` (those its image applies to) without a signed approval."""
        ids = {path.rstrip("/").rsplit("/", 1)[-1] for path in paths}
        facts = replace(self.facts, members=tuple(m for m in self.facts.members if m.id in ids))
        lines = profile_refusals(
            self.node_id,
            self.selection,
            facts,
            [intent],
            login=self.login,
            privileges=self.privileges,
        )
        _refuse(self.node_id, self.profile, lines)

    def related(self, paths: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """member path -> its ``RelatedItem`` paths, as read by :func:`choose`, for the
        members of ``paths`` it read."""
        by_id = {member.id: member.related for member in self.facts.members}
        ids = {path: path.rstrip("/").rsplit("/", 1)[-1] for path in paths}
        return {path: by_id[i] for path, i in ids.items() if i in by_id}

    def member_paths(self, component: Component) -> tuple[str, ...]:
        """The FirmwareInventory members that hold ``component`` under the profile."""
        ids = members_of(self.profile, component, self.facts.members)
        return tuple(f"{FIRMWARE_INVENTORY}/{member_id}" for member_id in ids)


def _offers_sessions(root: dict[str, object]) -> bool:
    links = root.get("Links")
    return "SessionService" in root or (isinstance(links, dict) and "Sessions" in links)


async def choose(
    ctx: StepContext, node: FleetNode, progress: FirmwareProgress, intents: Sequence[Intent]
) -> NodeBmc:
    """Read the node's BMC, choose its profile and record it in ``progress``; :class:`Stop`
    (failed, nothing written) with one line when the profile's refusals say it must not be
    flashed as ``intents`` ask."""
    try:
        root = await ctx.client.service_root(bmc_target(node))
    except BmcUnavailable:
        raise
    except BmcError as exc:
        raise Stop(S.FAILED, f"BMC {node.node_id}: the service root: {exc}") from None
    login = LoginMethod.SESSION if _offers_sessions(root) else LoginMethod.BASIC
    progress.bmc_login = login.value
    progress.bmc_expand = offers_expand(root)
    named = ctx.policy.profile_named_for(node.node_id, node.profile)
    if named is not None and login not in profile_named(named).login:
        allowed = ", ".join(profile_named(named).login)  # refused before any login
        line = f"login by {login} is not allowed by the profile (allowed: {allowed})"
        _refuse(node.node_id, profile_named(named), [line])
    username = ctx.credentials.get(node.node_id)[0]
    async with ctx.session(node, progress) as bmc:
        facts = await read_facts(bmc, root)
        try:
            roles, privileges = await session_roles(bmc, username)
        except (AccountUnknown, BmcRefused):  # no AccountService (404): it does not say
            roles, privileges = (), None
    if named is not None:
        selection = Selection(profile_named(named), (NAMED,), ())
    else:
        try:
            selection = select_profile(facts)
        except ValueError as exc:
            raise Stop(S.FAILED, f"BMC {node.node_id}: {exc}; nothing written") from None
    progress.bmc_profile = selection.profile.id
    head = f"BMC {node.node_id} (profile {selection.profile.id})"
    # Downgrades are judged once the members are narrowed to those the image applies to
    # (``NodeBmc.refuse_downgrade``): a package for one NIC model leaves the others alone.
    unversioned = [replace(i, version=None) for i in intents]
    lines = profile_refusals(
        node.node_id, selection, facts, unversioned, login=login, privileges=privileges
    )
    lines += [f"{head}: {line}" for line in await _reset_refusals(ctx, node, progress, selection)]
    account = None if privileges is None else account_refusal(selection.profile, privileges, roles)
    if account is not None:  # the updater's own wording, naming the roles, stands for them
        lines = [f"{head}: {account}"] + [
            line for line in lines if not line.startswith(f"{head}: the account")
        ]
    _refuse(node.node_id, selection.profile, lines)
    return NodeBmc(node.node_id, selection, facts, login, privileges)


async def _reset_refusals(
    ctx: StepContext, node: FleetNode, progress: FirmwareProgress, selection: Selection
) -> list[str]:
    """Whether the BMC takes the profile's activation reset (GETs only), as ``bmc probe`` asks
    (``probe.reset_refusals``): here, not found out once the node is drained and written."""
    async with ctx.session(node, progress) as bmc:
        return await reset_refusals(bmc, selection.profile, ctx.policy.update)


async def refuse_unprivileged_flip_back(
    ctx: StepContext,
    node: FleetNode,
    update: FirmwareUpdate,
    profile: BmcProfile,
    previous: Mapping[str, str],
) -> None:
    """:class:`Stop` (failed, nothing written) where the account lacks the privilege DSP8011
    gives the writes of an ``inactive_image`` flip-back of ``previous`` (member path ->
    previous version): the PATCH of each device's ``Links.ActiveSoftwareImage`` (a Manager:
    ConfigureManager) and the profile's activation reset (``Manager.Reset``: the same). Read
    (GETs only) before anything is drained; an account whose privileges cannot be read is
    refused. For the flip-back's preflight (``steps.rollback``)."""
    writes = [(await find_inactive(update, profile, m, v)).device for m, v in previous.items()]
    act = profile.activation
    if act.reset is not ResetKind.NONE and act.resource is not None:
        writes += await update.resources(act.resource)
    bmc = update.bmc
    assert isinstance(bmc, BmcSession)  # noqa: S101 - the step's session
    try:
        _, privileges = await session_roles(bmc, ctx.credentials.get(node.node_id)[0])
    except (AccountUnknown, BmcRefused):
        privileges = None
    head = f"BMC {node.node_id} (profile {profile.id})"
    lines = write_refusals(head, list(dict.fromkeys(writes)), privileges, "the flip-back")
    _refuse(node.node_id, profile, lines)


def _refuse(node_id: str, profile: BmcProfile, lines: Sequence[str]) -> None:
    """:class:`Stop` with every refusal on one line naming the BMC and the profile."""
    if lines:
        head = f"BMC {node_id} (profile {profile.id})"
        missing = "; ".join(line.removeprefix(f"{head}: ") for line in lines)
        log.warning("refused: %s: %s", head, missing)
        raise Stop(S.FAILED, f"refused: {head}: {missing}; nothing written")


def profile_of(progress: FirmwareProgress) -> BmcProfile | None:
    """The profile preflight chose for the item; None for an item begun before profiles were
    chosen (it keeps that release's behaviour: ``Stage`` and ``Activate``)."""
    return None if progress.bmc_profile is None else profile_named(progress.bmc_profile)


def push_request(
    profile: BmcProfile | None, targets: Sequence[str], version: str, *, stage: bool
) -> UpdateRequest:
    """How one component's image is pushed under ``profile``: with ``Stage`` where it stages
    and activates (and for an item without a profile, an A/B part pushed while in service),
    else with the apply time its activation declares (``Immediate``: the image runs once
    written, or at the profile's reset; ``OnReset``: at the reset)."""
    if profile is None or profile.activation.stage_and_activate:
        return UpdateRequest(tuple(targets), version, stage=stage)
    return UpdateRequest(tuple(targets), version, apply_time=profile.activation.apply_time)


def stages_in_service(profile: BmcProfile | None) -> bool:
    """Whether an A/B part is pushed while the node still runs its jobs: where the written
    image waits (``Stage``, or the profile's reset) instead of running once written."""
    return (
        profile is None
        or profile.activation.stage_and_activate
        or profile.activation.reset is not ResetKind.NONE
    )


def update_policy(ctx: StepContext, profile: BmcProfile | None) -> UpdatePolicy:
    """The executor's write-side bounds with the profile's task-less bound (``policy_for``)."""
    return ctx.policy.update if profile is None else policy_for(profile, ctx.policy.update)
