"""A Slurm node as ``scontrol --oneliner show node NAME`` prints it, and what its state means
for a drain (pure: the adapter runs the command, this reads its output).

The line is ``Key=value`` fields separated by spaces, but values may hold spaces themselves
(``OS=Linux 6.1 #1 SMP``, and the drain reason), so only the fields the updater needs are
read, by name. Slurm prints ``Reason=`` last, followed by who set it and when
(``Reason=hw ticket 42 [root@2026-11-24T21:04:36]``, slurm 22.05 ``scontrol show node``).

The state is a base state and ``+``-joined flags (``ALLOCATED+DRAIN``, ``IDLE+DRAIN``,
``MIXED+DRAIN+COMPLETING``; slurm(1) "NODE STATE CODES"). Slurm itself calls a drained node
with jobs still on it ``draining`` and one without ``drained``: ``sinfo`` shows exactly that.
A drain is Lockstep's when its reason starts with ``OWNER:``; any other reason is someone
else's, which the updater never replaces nor resumes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lockstep_updater.domain.drains import OWNER, DrainState

REASON_PREFIX = f"{OWNER}: "
"""How every reason Lockstep sets begins: ``lockstep-updater: <why>``."""
BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})
"""Base states and flags that mean jobs still run (or are being cleaned up) on the node."""
OUT = frozenset({"DRAIN", "DOWN", "FAIL", "MAINT", "REBOOT_REQUESTED", "REBOOT_ISSUED"})
"""Base states and flags that mean the node was taken out of service by someone."""

_NAME = re.compile(r"^NodeName=(\S+)")
_STATE = re.compile(r"(?:^| )State=(\S+)")
_REASON = re.compile(r" Reason=(.*?)(?: \[([^@\]\s]*)@([^\]]*)\])?\s*$")


class UnreadableNode(ValueError):
    """The text is not one node of ``scontrol --oneliner show node``."""


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """The parts of a Slurm node the updater acts on."""

    name: str
    state: str
    """The base state: ``IDLE``, ``ALLOCATED``, ``MIXED``, ``DOWN``, ..."""
    flags: frozenset[str]
    """``DRAIN``, ``COMPLETING``, ``NOT_RESPONDING``, ..."""
    reason: str | None
    """Why it was taken out of service (without Slurm's ``[user@time]``); None: no reason."""
    reason_by: str | None = None
    """Who set the reason, as Slurm recorded it."""

    @property
    def words(self) -> frozenset[str]:
        return self.flags | {self.state}

    @property
    def drained(self) -> bool:
        """Someone took the node out of service (a drain, or down/failed with a reason)."""
        return bool(self.words & OUT)

    @property
    def ours(self) -> bool:
        """The drain is Lockstep's: its reason is the one the updater sets."""
        return self.drained and self.reason is not None and self.reason.startswith(REASON_PREFIX)

    def drain_state(self) -> DrainState:
        """How far Lockstep's drain has come; ``NOT_DRAINED`` for no drain or a foreign one."""
        if not self.ours or "DRAIN" not in self.words:
            return DrainState.NOT_DRAINED
        return DrainState.DRAINING if self.words & BUSY else DrainState.DRAINED


def lockstep_reason(why: str) -> str:
    """The reason Lockstep's drains carry: ``OWNER: why`` on one line (Slurm keeps one line)."""
    return REASON_PREFIX + " ".join(why.split())


def parse_node(text: str) -> SlurmNode:
    """One node from ``scontrol --oneliner show node NAME``; :class:`UnreadableNode` otherwise."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise UnreadableNode(f"expected one node line, got {len(lines)}")
    line = lines[0]
    name, state = _NAME.search(line), _STATE.search(line)
    if name is None or state is None:
        raise UnreadableNode(f"no NodeName= or State= in {line[:120]!r}")
    base, *flags = state.group(1).split("+")
    reason = _REASON.search(line)
    return SlurmNode(
        name=name.group(1),
        state=base.rstrip("*~#!%$@^-").upper(),  # sinfo-style suffixes, should any appear
        flags=frozenset(f.upper() for f in flags),
        reason=reason.group(1) if reason and reason.group(1) else None,
        reason_by=reason.group(2) if reason and reason.group(2) else None,
    )
