"""A scripted BMC (what ``lockstep_redfish.tasks.Requester`` asks of a session) and a clock
that only moves when something sleeps on it, for the write side's unit tests."""

from __future__ import annotations

from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from lockstep_redfish.transport import Body, Reply

BASE = "https://bmc.example"


def reply(status: int, body: Any = None, **headers: str) -> Reply:
    """A Reply; header names with ``_`` become ``-`` (``Retry_After`` -> ``Retry-After``)."""
    named = {name.replace("_", "-"): value for name, value in headers.items()}
    return Reply(status, CIMultiDictProxy(CIMultiDict(named)), body)


def task(state: str, percent: int = 0, *messages: tuple[str, str]) -> dict[str, Any]:
    return {
        "@odata.id": "/redfish/v1/TaskService/Tasks/1",
        "TaskState": state,
        "PercentComplete": percent,
        "Messages": [{"MessageId": m, "Message": text} for m, text in messages],
    }


class ScriptedBmc:
    """Answers each request with the next scripted Reply, or raises the next exception."""

    def __init__(self, *answers: Reply | BaseException) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.reopened = 0

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
        sent = {"json": json_body, "data": data, "headers": headers, "retries": retries}
        self.requests.append((method, path, sent))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def reopen(self) -> None:
        self.reopened += 1

    def url(self, path: str) -> str:
        return BASE + path


class FakeClock:
    """``clock()`` for the code under test; ``sleep`` records the delay and moves time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
