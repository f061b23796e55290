"""The Redfish write side: push an image, follow its task, activate, reset, read back.

:class:`FirmwareUpdate` works on one open session (``async with client.session(target) as
bmc``: the session is always closed, TLS verified unless the BMC's own setting says otherwise)
and offers each step on its own, so that a caller that persists its progress (the updater's
step machine) can resume at any of them, plus :meth:`FirmwareUpdate.update` that runs them in
order::

    result = await FirmwareUpdate(bmc).update(image, UpdateRequest(targets, "97.00.9A.00.01"))

The steps and what each guarantees:

- :meth:`~FirmwareUpdate.preflight` hashes the image, reads UpdateService and every target and
  applies ``preflight.preflight`` (size, Updateable, WriteProtected, LowestSupportedVersion,
  apply time, Stage); targets already at the version need no write.
- :meth:`~FirmwareUpdate.push` sends the image once: multipart to ``MultipartHttpPushUri``
  (``UpdateParameters`` with ``Targets``, ``@Redfish.OperationApplyTime`` and ``Stage``),
  ``SimpleUpdate`` with an :class:`~lockstep_redfish.image_server.ImageServer` URL when the BMC
  has no multipart URI, else the bare image to ``HttpPushUri`` (its targets PATCHed first).
  The image is checked against its digest immediately before every send (its bytes hashed
  once per object, ``FirmwareImage.actual``). It is sent again only when the BMC
  cannot have taken it (no connection, or 429/500/503: "not now"); when it may have (no answer
  after sending, 502/504) it raises :class:`PushOutcomeUnknown`.
- :meth:`~FirmwareUpdate.wait` follows the task (``tasks.wait_for_task``): deadline,
  ``Retry-After``, a BMC that reboots and is dark for minutes (bounded), never a re-push.
- :meth:`~FirmwareUpdate.activate` (``UpdateService.Activate`` or ``SoftwareInventory.Activate``)
  and :meth:`~FirmwareUpdate.reset` (``ComputerSystem.Reset`` / ``Manager.Reset``).
- :meth:`~FirmwareUpdate.verify` reads the targets back until each reports the version pushed;
  unchanged, downgraded, other or missing is :class:`NotVerified` (``readback``).
- :meth:`~FirmwareUpdate.patch` changes a resource under ``If-Match`` with the ETag it was just
  read with (DSP0266 "ETags": PUT/PATCH shall support If-Match); 412 is
  :class:`ResourceChanged`. Actions are not sent conditionally: bmcweb (OpenBMC) checks an
  ``If-Match`` on a POST against a GET of the action URI itself, which is no resource, so any
  real ETag would be refused there; the step re-reads instead, right before the action.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from lockstep_redfish.errors import (
    BmcError,
    BmcRefused,
    BmcUnavailable,
    NotVerified,
    PushOutcomeUnknown,
    RedfishReplyError,
    UpdateRefused,
    status_error,
)
from lockstep_redfish.expand import EXPAND, split_members
from lockstep_redfish.image import FirmwareImage, off_loop
from lockstep_redfish.image_server import ImageServer
from lockstep_redfish.models import (
    Collection,
    ResetAction,
    UpdatableSoftware,
    UpdateService,
    error_text,
    parse,
)
from lockstep_redfish.multipart import multipart_body
from lockstep_redfish.preflight import IMMEDIATE, Method, Preflight, UpdateRequest, preflight
from lockstep_redfish.profile import BmcProfile
from lockstep_redfish.readback import Readback, describe, judge
from lockstep_redfish.selection import BmcFacts
from lockstep_redfish.tasks import (
    Clock,
    Requester,
    Sleep,
    TaskOutcome,
    TaskPolicy,
    TaskRef,
    follow_task,
    task_ref,
    wait_for_task,
)
from lockstep_redfish.transport import Body, Reply, RetryPolicy

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

UPDATE_SERVICE = "/redfish/v1/UpdateService"  # the schema's only URI for it (Redfish.Uris)
SYSTEMS = "/redfish/v1/Systems"
MANAGERS = "/redfish/v1/Managers"
# Answers after which the BMC has not taken a non-idempotent request (DSP0266 "HTTP status
# codes": 429 too many requests, 503 temporarily unavailable, 500 the request could not be
# fulfilled). 502/504 come from a gateway that may have passed the request on.
NOT_TAKEN = frozenset({429, 500, 503})
ACCEPTED = frozenset({200, 201, 202, 204})


@dataclass(frozen=True, slots=True)
class Observed(Generic[T]):
    """A resource as read, with the ETag it was read with (None when the BMC gives none)."""

    item: T
    etag: str | None


@dataclass(frozen=True, slots=True)
class UpdatePolicy:
    """Bounds of the write side (seconds)."""

    tasks: TaskPolicy = field(default_factory=TaskPolicy)
    sends: int = 3  # sends of one push or action while the BMC has not taken it
    resend: RetryPolicy = field(  # the wait between them: backoff, or Retry-After (capped)
        default_factory=lambda: RetryPolicy(backoff_s=1.0, max_retry_after_s=60.0)
    )
    push_timeout_s: float = 600.0  # one push: a 200 MB image to a slow BMC
    settle_s: float = 120.0  # how long the inventory may lag a completed task
    reachable_s: float = 900.0  # a BMC rebooting after a reset (reliability.md 7.D2)
    read_poll_s: float = 5.0  # between reads while waiting on the inventory or the BMC

    def __post_init__(self) -> None:
        if self.sends < 1:
            raise ValueError("sends must be >= 1")
        if min(self.push_timeout_s, self.settle_s, self.reachable_s, self.read_poll_s) <= 0:
            raise ValueError("update policy bounds must be positive")


def policy_for(profile: BmcProfile, base: UpdatePolicy | None = None) -> UpdatePolicy:
    """``base`` (default: the defaults) with the bounds ``profile`` sets: how long a task-less
    answer is read back for (``taskless.wait_s``)."""
    policy = base or UpdatePolicy()
    tasks = replace(policy.tasks, taskless_s=profile.taskless.wait_s)
    return replace(policy, tasks=tasks)


def readback_window(task: TaskOutcome, policy: UpdatePolicy) -> float:
    """How long the inventory is read back after ``task`` ended (``FirmwareUpdate.verify``).

    Accepted without a task: the profile's bound (``TaskPolicy.taskless_s``), the same one the
    updater gives such a node. A task the BMC forgot mid-flash (it rebooted): it may still be
    writing, so the rest of the task deadline. Otherwise: the inventory's lag (``settle_s``).
    """
    if task.taskless:
        return policy.tasks.taskless_s
    if task.forgotten:
        return max(policy.tasks.deadline_s - task.waited_s, policy.settle_s)
    return policy.settle_s


@dataclass(frozen=True, slots=True)
class UpdateResult:
    """What :meth:`FirmwareUpdate.update` did. ``pushed`` is False when every target was
    already at the version (nothing written); ``after`` is None while staged, unverified."""

    before: Mapping[str, str | None]
    after: Mapping[str, str] | None
    pushed: bool
    task: TaskOutcome | None = None
    activations: tuple[TaskOutcome, ...] = ()
    elapsed_s: float = 0.0


def _any(globs: Sequence[str], value: str) -> bool:
    return any(fnmatchcase(value, g) for g in globs)


def _etag(headers: Mapping[str, str], body: Any) -> str | None:
    tag = headers.get("ETag")
    if tag is None and isinstance(body, dict) and isinstance(body.get("@odata.etag"), str):
        tag = body["@odata.etag"]
    return tag


class FirmwareUpdate:
    """The write side on one open session (see the module docstring)."""

    def __init__(
        self,
        bmc: Requester,
        policy: UpdatePolicy | None = None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        expand: bool = False,
    ) -> None:
        self.bmc = bmc
        self.policy = policy or UpdatePolicy()
        self.clock = clock
        self.sleep = sleep
        self.expand = expand
        """Whether the BMC's service root advertises ``$expand`` (``expand.offers_expand``):
        :meth:`members` then reads several members of one collection in one request."""

    # -- reads -------------------------------------------------------------------------------

    async def _get(self, path: str) -> Reply:
        """GET ``path`` (200 only); one new login when the BMC forgot the session."""
        reply = await self.bmc.request("GET", path)
        if reply.status == 401:
            await self.bmc.reopen()
            reply = await self.bmc.request("GET", path)
        if reply.status != 200:
            raise status_error("GET", self.bmc.url(path), reply.status)
        return reply

    async def read(self, model: type[M], path: str) -> Observed[M]:
        """``path`` parsed as ``model``, with its ETag."""
        reply = await self._get(path)
        return Observed(
            parse(model, reply.body, self.bmc.url(path)), _etag(reply.headers, reply.body)
        )

    async def update_service(self) -> Observed[UpdateService]:
        return await self.read(UpdateService, UPDATE_SERVICE)

    async def members(self, paths: tuple[str, ...]) -> dict[str, Observed[UpdatableSoftware]]:
        """Each FirmwareInventory member in ``paths``, read now: with ``expand``, the members
        of one collection in one request (``$expand=.($levels=1)``), each with its own
        ``@odata.etag``, never the collection's; a member the BMC left as a link or did not
        list, and every member when the expanded answer is refused or is not one
        (``expand.split_members``), with its own GET."""
        found: dict[str, Observed[UpdatableSoftware]] = {}
        if self.expand and len(paths) > 1:
            found = await self._expanded(paths)
        return {
            path: found[path] if path in found else await self.read(UpdatableSoftware, path)
            for path in paths
        }

    async def _expanded(self, paths: tuple[str, ...]) -> dict[str, Observed[UpdatableSoftware]]:
        """The members of ``paths`` that their collections' expanded answers hold."""
        found: dict[str, Observed[UpdatableSoftware]] = {}
        for parent in dict.fromkeys(path.rstrip("/").rpartition("/")[0] for path in paths):
            url = self.bmc.url(parent + EXPAND)
            try:
                docs, _ = split_members((await self._get(parent + EXPAND)).body, url)
            except BmcUnavailable:
                raise
            except BmcError:  # refused, or not an expanded collection: read one by one
                continue
            for path in paths:
                doc = docs.get(path.rstrip("/"))
                if doc is None:
                    continue
                try:
                    item = parse(UpdatableSoftware, doc, url, f"Members[{path}]")
                except RedfishReplyError:  # its own GET says what it is, or fails as it does
                    continue
                etag = doc.get("@odata.etag")
                found[path] = Observed(item, etag if isinstance(etag, str) else None)
        return found

    async def collection(self, path: str) -> list[str]:
        """The member paths of a collection (``SYSTEMS``, ``MANAGERS``)."""
        reply = await self._get(path)
        members = parse(Collection, reply.body, self.bmc.url(path)).Members
        return [str(m.get("@odata.id")) for m in members if isinstance(m.get("@odata.id"), str)]

    # -- writes ------------------------------------------------------------------------------

    async def _send(
        self,
        path: str,
        *,
        what: str,
        json_body: dict[str, Any] | None = None,
        data: Body | None = None,
        headers: dict[str, str] | None = None,
        check: Callable[[], None] | None = None,
        timeout_s: float | None = None,
    ) -> Reply:
        """POST a non-idempotent request: sent again only while the BMC cannot have taken
        it; ``check()`` runs right before every send. Returns the accepting reply."""
        url = self.bmc.url(path)
        for send in range(self.policy.sends):
            if check is not None:
                # Off the event loop: hashing a large image takes milliseconds per push, which
                # would stall every other BMC's push in flight (image.off_loop).
                await off_loop(check)
            try:
                reply = await self.bmc.request(
                    "POST",
                    path,
                    json_body=json_body,
                    data=data,
                    headers=headers,
                    retries=0,
                    timeout_s=timeout_s,
                )
            except BmcUnavailable as exc:
                if exc.sent and exc.status not in NOT_TAKEN:
                    raise PushOutcomeUnknown(
                        f"{what} to {url}: {exc}; it may have been accepted: read the tasks "
                        "and the inventory before sending it again",
                        url=url,
                    ) from None
                if send + 1 == self.policy.sends:
                    raise
                await self.sleep(self.policy.resend.delay(send, exc.retry_after))
                continue
            if reply.status == 401 and send + 1 < self.policy.sends:
                await self.bmc.reopen()  # a 401 is checked before the body is acted on
                continue
            if reply.status in ACCEPTED:
                return reply
            detail = error_text(reply.body)
            error = status_error("POST", url, reply.status)
            if isinstance(error, BmcRefused) and detail:
                error = BmcRefused(f"{error}: {detail}", url=url, status=reply.status)
            raise error
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def preflight(
        self, image: FirmwareImage, request: UpdateRequest, *, read: BmcFacts | None = None
    ) -> Preflight:
        """Check the image, read the service and the targets, decide (``preflight``).
        ``read``: the documents the same step has just read (``probe.read_facts``), decided on
        instead of reading them again, for a preflight that writes nothing; a target they do
        not hold is read now. A push's own preflight reads, right before its write."""
        # Fail closed before anything is read or sent; off the event loop, as in _send.
        await off_loop(image.check)
        doc = None if read is None else read.update_service
        if doc is None:
            service = (await self.update_service()).item
        else:
            service = parse(UpdateService, dict(doc), self.bmc.url(UPDATE_SERVICE))
        known = {} if read is None else read.documents
        items = {
            p: parse(UpdatableSoftware, dict(known[p.rstrip("/")]), self.bmc.url(p))
            for p in request.targets
            if p.rstrip("/") in known
        }
        missing = tuple(p for p in request.targets if p not in items)
        if missing:
            items.update({p: m.item for p, m in (await self.members(missing)).items()})
        items = {p: items[p] for p in request.targets}
        return preflight(service, items, request, len(image.data))

    async def push(
        self,
        image: FirmwareImage,
        request: UpdateRequest,
        plan: Preflight,
        *,
        server: ImageServer | None = None,
        targets: Sequence[str] | None = None,
        parameters: Mapping[str, Any] | None = None,
    ) -> TaskRef:
        """Send ``image`` to ``plan.pending`` once, where ``plan`` (the preflight just made)
        says (see the module docstring). ``targets``: what ``Targets`` names instead of the
        members (a profile whose BMC takes their ``RelatedItem``, :meth:`related_targets`);
        ``parameters``: the profile's fixed ``UpdateParameters`` beside them."""
        if not plan.pending:
            raise ValueError("nothing to push: every target is at the version")
        parameters = {
            **(parameters or {}),
            "Targets": list(plan.pending if targets is None else targets),
            "@Redfish.OperationApplyTime": request.apply_time,
        }
        if request.stage:  # only when asked: a service before v1_16_0 rejects the property
            parameters["Stage"] = True
        if plan.method is Method.MULTIPART:
            body = multipart_body(parameters, image.data, image.filename)
            reply = await self._send(
                plan.uri,
                what=f"push of {image.filename}",
                data=body.pieces,  # body.image is the object hashed and the object sent
                headers={"Content-Type": body.content_type},
                check=lambda: image.check(body.image),
                timeout_s=self.policy.push_timeout_s,
            )
        elif plan.method is Method.HTTP_PUSH:
            reply = await self._http_push(image, request, plan, parameters)
        else:
            if server is None:
                raise UpdateRefused("SimpleUpdate needs an ImageServer the BMC can pull from")
            url = server.offer(image)  # hashed now; served only as these bytes
            reply = await self._send(
                plan.uri,
                what=f"SimpleUpdate of {image.filename}",
                json_body={"ImageURI": url, **parameters},
                check=image.check,
            )
        return task_ref(reply, self.bmc.url(""))

    async def _http_push(
        self,
        image: FirmwareImage,
        request: UpdateRequest,
        plan: Preflight,
        parameters: Mapping[str, Any],
    ) -> Reply:
        """DSP0266 "HTTP push update": the targets (and an apply time other than the default)
        PATCHed onto UpdateService (``HttpPushUriTargets``, reserved with
        ``HttpPushUriTargetsBusy`` and released after; ``HttpPushUriOptions``), then the bare
        image POSTed to ``HttpPushUri``. Only ``Targets`` and the apply time can be said this
        way: other parameters are refused rather than dropped."""
        other = set(parameters) - {"Targets", "@Redfish.OperationApplyTime"}
        if other:
            raise UpdateRefused(f"HttpPushUri cannot carry {', '.join(sorted(other))}")
        reserve: dict[str, Any] = {
            "HttpPushUriTargets": list(parameters["Targets"]),
            "HttpPushUriTargetsBusy": True,
        }
        if request.apply_time != IMMEDIATE:
            options = {"HttpPushUriApplyTime": {"ApplyTime": request.apply_time}}
            reserve["HttpPushUriOptions"] = options
        await self.patch(UPDATE_SERVICE, reserve)
        try:
            return await self._send(
                plan.uri,
                what=f"HTTP push of {image.filename}",
                data=image.data,
                headers={"Content-Type": "application/octet-stream"},
                check=image.check,
                timeout_s=self.policy.push_timeout_s,
            )
        finally:  # released whatever became of the push (another client may need it); a
            # BMC that cannot be reached now keeps the push's own outcome, not this one's
            with contextlib.suppress(BmcError):
                await self.patch(UPDATE_SERVICE, {"HttpPushUriTargetsBusy": False})

    async def related_targets(self, paths: Sequence[str], taken: Sequence[str]) -> list[str]:
        """What ``Targets`` names for ``paths`` on a BMC that takes a member's device: the
        member's first ``RelatedItem`` (SoftwareInventory v1_1_0) matching a glob of ``taken``
        (Supermicro's BMC member -> ``/redfish/v1/Managers/1``), else the member itself; each
        named once."""
        found: list[str] = []
        for path in paths:
            body = (await self._get(path)).body
            related = body.get("RelatedItem") if isinstance(body, dict) else None
            items = [r.get("@odata.id") for r in related or [] if isinstance(r, dict)]
            usable = [i for i in items if isinstance(i, str) and _any(taken, i)]
            target = usable[0] if usable else path
            if target not in found:
                found.append(target)
        return found

    async def resources(self, pattern: str) -> list[str]:
        """The resources ``pattern`` names: itself, or where its last segment is a glob
        (``/redfish/v1/Systems/*``) the members of its collection that match, sorted."""
        parent, _, last = pattern.rstrip("/").rpartition("/")
        if not any(c in last for c in "*?["):
            return [pattern]
        return sorted(p for p in await self.collection(parent) if fnmatchcase(p, pattern))

    async def wait(self, ref: TaskRef) -> TaskOutcome:
        return await wait_for_task(
            self.bmc, ref, self.policy.tasks, clock=self.clock, sleep=self.sleep
        )

    async def follow(self, ref: TaskRef, *, hold_s: float, waited_s: float) -> TaskOutcome | None:
        """One turn of following ``ref`` (``tasks.follow_task``): its outcome, or None while
        it still runs after ``hold_s``."""
        return await follow_task(
            self.bmc,
            ref,
            self.policy.tasks,
            hold_s=hold_s,
            waited_s=waited_s,
            clock=self.clock,
            sleep=self.sleep,
        )

    async def activate(self, targets: tuple[str, ...], *, each: bool = False) -> list[TaskRef]:
        """Activate the images staged on ``targets``: one ``UpdateService.Activate`` when the
        service offers it (v1_16_0), else (or with ``each``) ``SoftwareInventory.Activate``
        per member (v1_12_0). Each target is re-read first and must report ``Staged`` where
        it reports it at all. Returns the tasks to follow (none for a synchronous answer)."""
        members = await self.members(targets)
        not_staged = [path for path, m in members.items() if m.item.Staged is False]
        if not_staged:
            raise UpdateRefused(f"nothing staged to activate on {', '.join(not_staged)}")
        service = (await self.update_service()).item
        if service.activate is not None and not each:
            body = {"Targets": [{"@odata.id": path} for path in targets]}
            replies = [await self._send(service.activate.target, what="Activate", json_body=body)]
        else:
            replies = []
            for path, member in members.items():
                action = member.item.Actions.activate if member.item.Actions else None
                if action is None:
                    raise UpdateRefused(f"{path} offers no SoftwareInventory.Activate")
                replies.append(await self._send(action.target, what="Activate", json_body={}))
        base = self.bmc.url("")
        return [task_ref(r, base) for r in replies if r.status == 202 or "Location" in r.headers]

    async def action(self, target: str, body: dict[str, Any], *, what: str) -> list[TaskRef]:
        """POST an action (``target``) once: sent again only while the BMC cannot have taken
        it (``_send``). Returns the task to follow, if it answered with one."""
        reply = await self._send(target, what=what, json_body=body)
        accepted = reply.status == 202 or "Location" in reply.headers
        return [task_ref(reply, self.bmc.url(""))] if accepted else []

    async def reset_action(self, resource: str, reset_type: str) -> ResetAction:
        """The ``Reset`` action of ``resource`` (``ComputerSystem``, ``Manager``, ``Chassis``),
        :class:`UpdateRefused` unless it allows ``reset_type``: its
        ``ResetType@Redfish.AllowableValues``, else the ``AllowableValues`` of ``ResetType``
        in its ``@Redfish.ActionInfo`` (DSP0266 "Allowable values"; ActionInfo v1_1_0); an
        action that lists neither allows what the schema does. GETs only: preflight asks it
        before anything is drained."""
        doc = (await self._get(resource)).body
        actions = doc.get("Actions") if isinstance(doc, dict) else None
        found = actions.items() if isinstance(actions, dict) else ()
        raw = next((v for k, v in found if k.endswith(".Reset")), None)
        if raw is None:
            raise UpdateRefused(f"{resource} offers no Reset action")
        action = parse(ResetAction, raw, self.bmc.url(resource), "Actions.Reset")
        allowed = action.reset_types
        info = raw.get("@Redfish.ActionInfo") if isinstance(raw, dict) else None
        if allowed is None and isinstance(info, str):
            doc = (await self._get(info)).body
            params = doc.get("Parameters") if isinstance(doc, dict) else None
            for param in params if isinstance(params, list) else ():
                values = param.get("AllowableValues") if isinstance(param, dict) else None
                if param.get("Name") == "ResetType" and isinstance(values, list):
                    allowed = [str(v) for v in values]
        if allowed is not None and reset_type not in allowed:
            listed = ", ".join(allowed) or "none"
            raise UpdateRefused(f"{resource}: ResetType {reset_type!r} not allowed ({listed})")
        return action

    async def reset(self, resource: str, reset_type: str) -> TaskRef | None:
        """``ComputerSystem.Reset`` or ``Manager.Reset`` of ``resource`` (a system or manager
        path) with ``reset_type``, refused unless the action allows it (:meth:`reset_action`).
        A manager reset takes the BMC away for minutes: follow with :meth:`wait_reachable`."""
        action = await self.reset_action(resource, reset_type)
        reply = await self._send(
            action.target, what=f"Reset {reset_type}", json_body={"ResetType": reset_type}
        )
        return task_ref(reply, self.bmc.url("")) if reply.status == 202 else None

    async def patch(
        self, path: str, changes: dict[str, Any], *, etag: str | None = None
    ) -> Observed[dict[str, Any]]:
        """PATCH ``changes`` onto ``path`` under ``If-Match``: ``etag`` from the read the
        change was decided on, else from a read made now (none if the BMC gives none);
        :class:`~lockstep_redfish.errors.ResourceChanged` when it changed since (412)."""
        tag = etag
        if tag is None:
            reply = await self._get(path)
            tag = _etag(reply.headers, reply.body)
        headers = {"If-Match": tag} if tag else None
        answer = await self.bmc.request("PATCH", path, json_body=changes, headers=headers)
        if answer.status not in {200, 204}:
            raise status_error("PATCH", self.bmc.url(path), answer.status)
        body = answer.body if isinstance(answer.body, dict) else {}
        return Observed(body, _etag(answer.headers, answer.body))

    # -- waiting on the BMC ------------------------------------------------------------------

    async def _dark(self, since: float, limit_s: float, problem: BmcError) -> None:
        """Wait one poll while the BMC does not answer; give up after ``limit_s``."""
        if self.clock() - since >= limit_s:
            raise BmcUnavailable(
                f"{self.bmc.url('')}: no answer for {limit_s:g}s ({problem})",
                url=self.bmc.url(""),
            )
        await self.sleep(self.policy.read_poll_s)

    async def wait_reachable(self) -> float:
        """Seconds until the BMC answers the service root again (after a reset), at most
        ``policy.reachable_s``."""
        started = self.clock()
        while True:
            try:
                await self._get("/redfish/v1/")
                return self.clock() - started
            except BmcUnavailable as exc:
                await self._dark(started, self.policy.reachable_s, exc)

    async def verify(
        self,
        request: UpdateRequest,
        before: Mapping[str, str | None],
        *,
        within_s: float | None = None,
    ) -> dict[str, str]:
        """Read every target of ``request`` until each reports ``request.version``; wait up
        to ``within_s`` (default ``policy.settle_s``) while a target is unchanged or has no
        version yet, and while the BMC does not answer (at most ``policy.reachable_s``).
        A downgrade or another version fails at once. Returns the versions read."""
        started = self.clock()
        limit = self.policy.settle_s if within_s is None else within_s
        dark_since: float | None = None
        while True:
            try:
                members = await self.members(request.targets)
            except BmcUnavailable as exc:
                dark_since = self.clock() if dark_since is None else dark_since
                await self._dark(dark_since, self.policy.reachable_s, exc)
                continue
            dark_since = None
            verdicts = {
                path: judge(before.get(path), m.item.Version, request.version, m.item.VersionScheme)
                for path, m in members.items()
            }
            if all(v is Readback.VERIFIED for v in verdicts.values()):
                return dict.fromkeys(members, request.version)
            final = any(v in {Readback.DOWNGRADED, Readback.OTHER} for v in verdicts.values())
            if final or self.clock() - started >= limit:
                wrong = [
                    describe(path, verdict, before.get(path), members[path].item.Version)
                    for path, verdict in verdicts.items()
                    if verdict is not Readback.VERIFIED
                ]
                raise NotVerified(
                    f"update to {request.version!r} not verified: {'; '.join(wrong)}",
                    targets=[p for p, v in verdicts.items() if v is not Readback.VERIFIED],
                )
            await self.sleep(self.policy.read_poll_s)

    # -- the whole sequence ------------------------------------------------------------------

    async def update(
        self,
        image: FirmwareImage,
        request: UpdateRequest,
        *,
        activate: bool = True,
        server: ImageServer | None = None,
    ) -> UpdateResult:
        """preflight -> push -> wait -> (activate staged images) -> verify.

        With ``request.stage`` and ``activate=False`` it stops once the image is staged
        (``after`` None). An ``OnReset`` apply time also stops there: the reset is the
        caller's decision (it interrupts the host). Already at the version: no write.
        """
        started = self.clock()
        plan = await self.preflight(image, request)
        if not plan.pending:
            versions = dict.fromkeys(request.targets, request.version)
            return UpdateResult(plan.before, versions, pushed=False)
        ref = await self.push(image, request, plan, server=server)
        try:
            task = await self.wait(ref)
        finally:
            if server is not None:
                server.withdraw(image)
        pending = UpdateRequest(plan.pending, request.version, request.apply_time, request.stage)
        if (request.stage and not activate) or request.apply_time != IMMEDIATE:
            return UpdateResult(plan.before, None, True, task, elapsed_s=self.clock() - started)
        activations: list[TaskOutcome] = []
        if request.stage:
            for activation in await self.activate(plan.pending):
                activations += [await self.wait(activation)]
        window = readback_window(task, self.policy)
        after = await self.verify(pending, plan.before, within_s=window)
        return UpdateResult(
            plan.before, after, True, task, tuple(activations), self.clock() - started
        )
