"""The process's open-file limit (``RLIMIT_NOFILE``), raised where a server needs more sockets
than a shell's usual soft limit (1024) allows: the simulator serving thousands of BMCs, an
updater keeping a Redfish session per node of a large wave."""

from __future__ import annotations

import resource

HEADROOM = 512
"""File descriptors kept for everything else a process opens (logs, its database pool, NATS)."""


def raise_fd_limit(needed: int) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` towards ``needed`` (up to the hard limit); the soft
    limit now.

    Raises:
        RuntimeError: the hard limit is below ``needed``.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        try:  # allowed where the process may (CAP_SYS_RESOURCE), up to fs.nr_open
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))
        except (ValueError, OSError):
            raise RuntimeError(
                f"{needed} file descriptors needed, hard limit is {hard} (ulimit -Hn)"
            ) from None
        return needed
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        soft = needed
    return int(soft)


def fitting(count: int, per_item: int) -> int:
    """How many of ``count`` items holding ``per_item`` descriptors each the process may keep:
    the soft limit raised for all of them where the hard limit allows, else as many as fit."""
    try:
        raise_fd_limit(count * per_item + HEADROOM)
    except RuntimeError:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return max(1, (int(hard) - HEADROOM) // per_item)
    return count
