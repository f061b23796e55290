"""In-memory stand-ins for the shared library's collaborators, for unit tests of handlers and
workers that need no PostgreSQL (the integration tests run the real outbox)."""

from __future__ import annotations

from lockstep_common.envelope import Envelope, EventData, source_of
from lockstep_common.outbox import EventSink


class RecordedEvents(EventSink):
    """An ``EventSink`` that keeps what was emitted, in order, as (subject, envelope)."""

    __slots__ = ("emitted",)

    def __init__(self, source: str = source_of("test")) -> None:
        super().__init__(source)
        self.emitted: list[tuple[str, Envelope[EventData]]] = []

    def _keep(self, subject: str, env: Envelope[EventData]) -> None:
        self.emitted.append((subject, env))

    @property
    def events(self) -> list[EventData]:
        """The payloads emitted, in order."""
        return [env.data for _, env in self.emitted]

    def clear(self) -> None:
        """Forget what was recorded so far."""
        self.emitted.clear()
