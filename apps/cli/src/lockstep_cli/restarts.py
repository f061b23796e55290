"""When ``lockstep up`` starts a crashed service again: a pure table of decisions, the clock
passed in (the supervisor loop in ``supervisor.py`` acts on them).

A crash is restarted after an exponentially growing delay (1, 2, 4 ... 60 s), so a service that
dies at once is not restarted in a tight loop; a service that then ran for a minute counts as
recovered and its next crash waits 1 s again. Exit codes 2 (bad settings) and 3 (the start-up
self-check refused: live topology or migrations differ) say a restart cannot help until an
operator changes something, so those are not restarted; the rest of the stack keeps running.
An embedded nats-server that exits is restarted with the same backoff, whatever its code.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockstep_common.backoff import Backoff

NOT_RESTARTABLE = frozenset({2, 3})  # settings, topology/migration mismatch (service.run_service)


@dataclass(slots=True)
class RestartPolicy:
    """One service's crash history and what it allows."""

    base_s: float = 1.0
    cap_s: float = 60.0
    stable_s: float = 60.0
    crashes: int = 0
    started_at: float = 0.0
    fatal: frozenset[int] = NOT_RESTARTABLE
    """Exit codes a restart cannot help (a service's; an embedded server has none: it is
    always started again)."""

    def started(self, now: float) -> None:
        """The service was (re)started at ``now``."""
        self.started_at = now

    def delay_after(self, exit_code: int, now: float) -> float | None:
        """Seconds to wait before starting the service again after it exited with
        ``exit_code`` at ``now``; None when it must not be restarted."""
        if exit_code in self.fatal:
            return None
        if now - self.started_at >= self.stable_s:
            self.crashes = 0  # it had recovered: this is a new incident
        delay = Backoff(self.base_s, self.cap_s).delay(self.crashes)
        self.crashes += 1
        return delay
