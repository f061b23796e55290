"""One exponential backoff: the wait before the next try after ``attempt`` failures.

``Backoff(base_s, cap_s).delay(n)`` is ``base_s * factor**n`` capped at ``cap_s`` (so attempt 0
waits ``base_s``), the shape of the "exponential backoff" RFC 8961 section 4 and DSP0266's
retry guidance describe. ``jitter`` draws the wait from ``[delay * (1 - jitter), delay]``
("equal jitter" for 0.5), so clients that failed together do not retry together; without it
the delay is exact, for waits a test or an operator reads off. Attempts past the cap cost
nothing to compute (no ``2**attempt`` overflow after a long outage).

No backoff library is a dependency of the workspace and the rule is three lines; the relay,
the consumer, the database connect, the Redfish transport, the Kubernetes eviction and the
CLI's service restarts all use this one.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits that grow by ``factor`` per failed attempt, from ``base_s`` up to ``cap_s`` (a cap
    below ``base_s`` is the wait every time)."""

    base_s: float
    cap_s: float = math.inf
    factor: float = 2.0
    jitter: float = 0.0  # 0 <= jitter <= 1, the fraction of a wait that may be taken off
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.cap_s < 0 or self.factor < 1:
            raise ValueError(
                f"backoff needs base_s, cap_s >= 0 and factor >= 1, not base_s={self.base_s}, "
                f"cap_s={self.cap_s}, factor={self.factor}"
            )
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"backoff jitter must be in [0, 1], not {self.jitter}")

    def ceiling(self, attempt: int) -> float:
        """The wait after ``attempt`` failures (0-based) before any jitter."""
        if attempt < 0:
            raise ValueError(f"attempt must be >= 0, not {attempt}")
        if self.base_s == 0 or self.factor == 1:
            return min(self.base_s, self.cap_s)
        if self.cap_s <= self.base_s:
            return self.cap_s
        if math.isfinite(self.cap_s):
            # Past this many doublings the cap holds: stop before factor**attempt overflows.
            attempt = min(attempt, math.ceil(math.log(self.cap_s / self.base_s, self.factor)))
        try:
            return min(self.base_s * self.factor**attempt, self.cap_s)
        except OverflowError:
            return self.cap_s

    def delay(self, attempt: int) -> float:
        """The wait after ``attempt`` failures, jittered."""
        ceiling = self.ceiling(attempt)
        if not self.jitter:
            return ceiling
        return ceiling * (1.0 - self.jitter * self.rng.random())
