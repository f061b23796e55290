"""TaskService (TaskService v1_2_1) and Task (Task v1_7_0): long-running operations and their
task monitors (DSP0266 section "Asynchronous operations": 202 + Location, monitor GETs return
202 while running)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lockstep_sim.odata import ROOT, collection, ref, status

TASKS = f"{ROOT}/TaskService/Tasks"
MONITORS = f"{ROOT}/TaskService/TaskMonitors"
FINISHED = frozenset({"Completed", "Exception", "Cancelled", "Killed"})


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass(slots=True)
class Task:
    id: str
    name: str
    state: str = "New"
    percent: int = 0
    start: str = field(default_factory=now_iso)
    end: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    runner: asyncio.Task[None] | None = None

    @property
    def done(self) -> bool:
        return self.state in FINISHED

    def finish(self, state: str) -> None:
        self.state = state
        self.end = now_iso()
        if state == "Completed":
            self.percent = 100


def task_status(task: Task) -> str:
    """Task v1_7_0 TaskStatus: worst message severity, OK otherwise."""
    severities = {m.get("MessageSeverity") for m in task.messages}
    for level in ("Critical", "Warning"):
        if level in severities:
            return level
    return "OK"


def task_doc(task: Task) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "@odata.id": f"{TASKS}/{task.id}",
        "@odata.type": "#Task.v1_7_0.Task",
        "Id": task.id,
        "Name": task.name,
        "TaskState": task.state,
        "PercentComplete": task.percent,
        "StartTime": task.start,
        "TaskMonitor": f"{MONITORS}/{task.id}",
        "Messages": list(task.messages),
    }
    if task.done:  # EndTime and TaskStatus only once the task has finished (Task v1_7_0)
        doc["EndTime"] = task.end
        doc["TaskStatus"] = task_status(task)
    return doc


def task_service_doc(now: str) -> dict[str, Any]:
    return {
        "@odata.id": f"{ROOT}/TaskService",
        "@odata.type": "#TaskService.v1_2_1.TaskService",
        "Id": "TaskService",
        "Name": "Task Service",
        "ServiceEnabled": True,
        "DateTime": now,
        "CompletedTaskOverWritePolicy": "Oldest",
        "LifeCycleEventOnTaskStateChange": False,
        "Status": status(),
        "Tasks": ref(TASKS),
    }


def tasks_doc(ids: list[str]) -> dict[str, Any]:
    return collection(TASKS, "TaskCollection", "Task Collection", [f"{TASKS}/{i}" for i in ids])
