"""In-memory stand-ins for the shared library's collaborators, for unit tests of handlers and
workers that need no PostgreSQL (the integration tests run the real outbox)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from lockstep_common.envelope import Envelope, EventData, make_envelope, source_of


@dataclass(slots=True)
class RecordedEvents:
    """An ``outbox.EventSink`` that keeps what was emitted, in order, as (subject, envelope)."""

    source: str = source_of("test")
    emitted: list[tuple[str, Envelope[EventData]]] = field(default_factory=list)

    def emit(
        self,
        subject: str,
        data: EventData,
        *,
        about: str | None = None,
        correlation_id: str | None = None,
        event_id: uuid.UUID | None = None,
        occurred_at: datetime | None = None,
    ) -> Envelope[EventData]:
        """Record ``data`` as the outbox would have queued it."""
        env = make_envelope(
            data,
            source=self.source,
            subject=about,
            correlation_id=correlation_id,
            event_id=event_id,
            occurred_at=occurred_at,
        )
        self.emitted.append((subject, env))
        return env

    @property
    def events(self) -> list[EventData]:
        """The payloads emitted, in order."""
        return [env.data for _, env in self.emitted]

    def clear(self) -> None:
        """Forget what was recorded so far."""
        self.emitted.clear()
