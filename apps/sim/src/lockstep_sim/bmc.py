"""One emulated BMC's mutable state: sessions, tasks, ledger, faults; jobs run in ``jobs``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from lockstep_sim import jobs
from lockstep_sim.accounts import AccountStore
from lockstep_sim.dialects import DEFAULT, DIALECTS, Dialect
from lockstep_sim.faults import Fault
from lockstep_sim.fleet import Node
from lockstep_sim.injection import FaultControl
from lockstep_sim.options import OPERATOR_USERNAME
from lockstep_sim.sessions import SessionStore
from lockstep_sim.tasks import Task, now_iso
from lockstep_sim.update_service import UpdateOptions


@dataclass(slots=True)
class Bmc:
    node: Node
    username: str
    password: str
    time_scale: float
    sessions: SessionStore = field(default_factory=SessionStore)
    tasks: dict[str, Task] = field(default_factory=dict)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    power: str = "On"
    asset_tag: str = ""
    pending_reset: list[str] = field(default_factory=list)  # staged with ApplyTime OnReset
    # Members whose backup image (a dialect's Backup_* entry) was chosen to run at the next reset
    # through the device's Links.ActiveSoftwareImage (patching.choose_image).
    backup_next: set[str] = field(default_factory=set)
    accounts: AccountStore = field(default_factory=AccountStore)
    faults: FaultControl = field(default_factory=FaultControl)  # shared by the simulator
    offline_until: float = 0.0  # loop time until which connections are reset
    flash_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one flash at a time
    timers: list[asyncio.TimerHandle] = field(default_factory=list)  # pending silent reverts
    multipart_push: bool = True  # False: UpdateService offers SimpleUpdate only
    # DSP0266 "HTTP push update" (UpdateService HttpPushUri, deprecated from v1_6_0): the bare
    # image POSTed there, to the HttpPushUriTargets and apply time PATCHed onto UpdateService.
    http_push: bool = False
    http_push_targets: list[str] = field(default_factory=list)
    http_push_busy: bool = False
    http_push_apply_time: str = "Immediate"
    dialect: Dialect = field(default_factory=lambda: DIALECTS[DEFAULT])  # what it says, takes
    task_counter: int = 0  # task ids are never reused, also after a reboot forgot the tasks
    runners: set[asyncio.Task[None]] = field(default_factory=set)  # jobs, also forgotten ones
    # Extra ledger details read at the instant a call is recorded: FleetRuntime adds the node's
    # scheduler state, so a test can tell whether a node was drained when its BMC took a flash.
    annotate: Callable[[], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        self.accounts.add(self.username, self.password)
        if self.username != OPERATOR_USERNAME:
            self.accounts.add(OPERATOR_USERNAME, self.password, self.dialect.operator_role)

    @property
    def uuid(self) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"lockstep-sim:{self.node.id}"))

    def record(self, action: str, **details: Any) -> None:
        """Append one mutating call to the node's ledger (passwords are never passed here)."""
        self.ledger.append(
            {
                "node": self.node.id,
                "seq": len(self.ledger) + 1,
                "time": now_iso(),
                "action": action,
                **details,
                **(self.annotate() if self.annotate is not None else {}),
            }
        )

    def new_task(self, name: str) -> Task:
        self.task_counter += 1
        task = Task(id=str(self.task_counter), name=name)
        self.tasks[task.id] = task
        return task

    def start_update(self, plan: dict[str, str], options: UpdateOptions) -> Task:
        task = self.new_task("Firmware update")
        self._run(task, jobs.update(self, task, plan, options))
        return task

    def start_activate(self, members: list[str]) -> Task:
        task = self.new_task("Firmware activation")
        self._run(task, jobs.activate(self, task, members))
        return task

    def _run(self, task: Task, job: Coroutine[Any, Any, None]) -> None:
        runner = asyncio.get_running_loop().create_task(job)
        task.runner = runner
        self.runners.add(runner)
        runner.add_done_callback(self.runners.discard)

    def fault(self, kind: str, member_id: str = "", image: str = "") -> Fault | None:
        """The fault of ``kind`` that fires now on this node (and member, and activated
        image), recorded if so."""
        cls_kind = self.node.components[member_id].cls.kind if member_id else ""
        fault = self.faults.state.fire(frozenset({kind}), self.node.id, member_id, cls_kind, image)
        if fault is not None:
            details = {"component": member_id} if member_id else {}
            self.record("fault", kind="fault", fault=kind, **details)
        return fault

    def go_offline(self, seconds: float) -> None:
        """The BMC refuses connections for ``seconds`` (self-reset after a BMC flash, seed 000
        table "BMC firmware": node management blind during the flip)."""
        until = asyncio.get_running_loop().time() + seconds
        self.offline_until = max(self.offline_until, until)

    def forget_state(self) -> None:
        """What a reboot loses on a BMC that keeps sessions and tasks in RAM: every session
        and every Task (jobs already running go on; their monitors answer 404)."""
        self.sessions.by_token.clear()
        self.tasks.clear()

    @property
    def retry_after(self) -> str:
        """``Retry-After`` of a running task's monitor: one simulated minute (tasks run for
        minutes), in whole real seconds; 0 at the fast time scales tests use, where a task ends
        in milliseconds and a client told to wait a second would idle the whole time."""
        return str(round(self.time_scale))

    @property
    def offline(self) -> bool:
        return asyncio.get_running_loop().time() < self.offline_until

    def reset(self, kind: str) -> list[str]:
        """A reset of ``kind`` ("system", "manager", "chassis") activates the images waiting
        for one: any reset on the simulator's own dialect, only the dialect's activation reset
        on a dialect that names one (a GB200 tray runs its new images after a power cycle of
        the tray, not after a host restart). With background copy the other bank then holds
        the new image too."""
        wanted = self.dialect.activation_reset
        if wanted and kind != wanted:
            return []
        activated = [m for m in self.pending_reset if self.node.components[m].staged]
        for member_id in activated:
            jobs.flip(self, member_id)
            if self.dialect.background_copy:
                component = self.node.components[member_id]
                component.inactive_version = component.version
        self.pending_reset.clear()
        self.backup_next.difference_update(activated)
        return activated


def etag(doc: dict[str, Any]) -> str:
    """A strong ETag over the document's canonical JSON (DSP0266 "ETags")."""
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    return f'"{digest}"'


def with_etag(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with ``@odata.etag`` equal to its ETag header."""
    return {**doc, "@odata.etag": etag(doc)}
