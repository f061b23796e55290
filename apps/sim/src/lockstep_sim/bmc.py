"""One emulated BMC's mutable state: sessions, tasks, ledger and the update jobs."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from lockstep_sim.accounts import AccountStore
from lockstep_sim.errors import message
from lockstep_sim.fleet import Node
from lockstep_sim.sessions import SessionStore
from lockstep_sim.tasks import Task, now_iso
from lockstep_sim.update_service import UpdateOptions

STEPS = 4  # progress updates per phase


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
    accounts: AccountStore = field(default_factory=AccountStore)

    def __post_init__(self) -> None:
        self.accounts.add(self.username, self.password)

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
            }
        )

    def new_task(self, name: str) -> Task:
        task = Task(id=str(len(self.tasks) + 1), name=name)
        self.tasks[task.id] = task
        return task

    def start_update(self, plan: dict[str, str], options: UpdateOptions) -> Task:
        task = self.new_task("Firmware update")
        task.runner = asyncio.get_running_loop().create_task(self._update(task, plan, options))
        return task

    def start_activate(self, members: list[str]) -> Task:
        task = self.new_task("Firmware activation")
        task.runner = asyncio.get_running_loop().create_task(self._activate(task, members))
        return task

    async def _progress(self, task: Task, seconds: float, start: int, end: int) -> None:
        for step in range(1, STEPS + 1):
            await asyncio.sleep(seconds / STEPS)
            task.percent = start + (end - start) * step // STEPS

    async def _update(self, task: Task, plan: dict[str, str], options: UpdateOptions) -> None:
        task.state = "Running"
        activate = not options.stage and options.apply_time == "Immediate"
        for member_id in plan:
            task.messages.append(
                message("TargetDetermined", f"{member_id} selected.", (member_id,))
            )
        count = max(len(plan), 1)
        for n, (member_id, version) in enumerate(plan.items()):
            component = self.node.components[member_id]
            task.messages.append(
                message(
                    "TransferringToComponent",
                    f"Image {version} is being transferred to {member_id}.",
                    (version, member_id),
                )
            )
            span = 100 // count
            await self._progress(
                task, component.cls.stage_minutes * self.time_scale, n * span, n * span + span // 2
            )
            if component.banks:
                component.inactive_version, component.staged = version, True
            else:
                component.version = version
            if activate and component.banks:
                await self._progress(
                    task,
                    component.cls.activate_minutes * self.time_scale,
                    n * span + span // 2,
                    (n + 1) * span,
                )
                self._flip(member_id)
            elif component.banks:
                if options.apply_time == "OnReset" and not options.stage:
                    self.pending_reset.append(member_id)
                task.messages.append(
                    message("AwaitToActivate", f"Awaiting activation of {member_id}.", (member_id,))
                )
        if not plan:
            task.messages.append(message("Success", "Nothing to update: same versions."))
        task.messages.append(message("UpdateSuccessful", "Update completed.", ("all", "")))
        task.finish("Completed")

    async def _activate(self, task: Task, members: list[str]) -> None:
        task.state = "Running"
        for n, member_id in enumerate(members):
            component = self.node.components[member_id]
            await self._progress(
                task,
                component.cls.activate_minutes * self.time_scale,
                100 * n // len(members),
                100 * (n + 1) // len(members),
            )
            self._flip(member_id)
        task.messages.append(message("Success", "Activation completed."))
        task.finish("Completed")

    def reset(self) -> list[str]:
        """A system or BMC reset activates images pushed with ``OnReset`` apply time."""
        activated = [m for m in self.pending_reset if self.node.components[m].staged]
        for member_id in activated:
            self._flip(member_id)
        self.pending_reset.clear()
        return activated

    def _flip(self, member_id: str) -> None:
        """Switch the active bank to the staged one (A/B flip)."""
        component = self.node.components[member_id]
        if component.inactive_version is not None:
            component.version, component.inactive_version = (
                component.inactive_version,
                component.version,
            )
        component.staged = False


def etag(doc: dict[str, Any]) -> str:
    """A strong ETag over the document's canonical JSON (DSP0266 "ETags")."""
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    return f'"{digest}"'


def with_etag(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with ``@odata.etag`` equal to its ETag header."""
    return {**doc, "@odata.etag": etag(doc)}
