"""In-band software phases of a node, as a transition table (design.md: "state machines are
transition tables").

The phases follow the driver-change procedure of seed 004 (GSP firmware / driver mismatch
runbook): install the driver packages for a branch, rebuild DKMS against the kernel that will
boot, reboot, and come up either aligned (``READY``) or with the loaded module and the GSP
firmware on different versions (``GSP_MISMATCH``).
"""

from __future__ import annotations

import enum


class Phase(enum.StrEnum):
    """Where a node is in an in-band driver change."""

    READY = "ready"
    """Module loaded, firmware aligned, GPUs usable."""
    DRIVER_INSTALLED = "driver_installed"
    """Packages for a new branch are on disk; the running module is still the old one."""
    DKMS_BUILT = "dkms_built"
    """The module is built for the kernel that will boot; a reboot loads it."""
    DKMS_FAILED = "dkms_failed"
    """The module did not build (e.g. against a new kernel); rebooting now would lose the GPUs."""
    REBOOTING = "rebooting"
    """Between reboot and the module's load result."""
    GSP_MISMATCH = "gsp_mismatch"
    """The new module loaded but no ``/lib/firmware/nvidia/<version>`` dir exists for it."""
    MODULE_REJECTED = "module_rejected"
    """Secure Boot refused the unsigned DKMS-built module (seed 004: "Loading of unsigned
    module ... module verification failed"): no nvidia module is loaded. A signing problem,
    not a branch mismatch: re-sign or enroll a MOK; reinstalling the driver does not help."""


ALLOWED: dict[Phase, frozenset[Phase]] = {
    # A plain reboot of a healthy node is allowed; so is starting a driver change.
    Phase.READY: frozenset({Phase.DRIVER_INSTALLED, Phase.REBOOTING}),
    # Installing the packages normally triggers the DKMS build (seed 004, procedure step 5).
    Phase.DRIVER_INSTALLED: frozenset({Phase.DKMS_BUILT, Phase.DKMS_FAILED}),
    # No reboot from a failed build: the node would come up with no nvidia module at all.
    Phase.DKMS_FAILED: frozenset({Phase.DKMS_BUILT, Phase.DKMS_FAILED, Phase.DRIVER_INSTALLED}),
    Phase.DKMS_BUILT: frozenset({Phase.REBOOTING}),
    Phase.REBOOTING: frozenset({Phase.READY, Phase.GSP_MISMATCH, Phase.MODULE_REJECTED}),
    # Seed 004's recovery is "reinstall the driver as a single unit", then DKMS and reboot;
    # rebooting alone is allowed but comes back mismatched again.
    Phase.GSP_MISMATCH: frozenset({Phase.DRIVER_INSTALLED, Phase.REBOOTING}),
    # Once the key is enrolled (outside this model) a reboot loads the module; a reinstall is
    # allowed as from any broken phase, and comes back rejected again while the key is missing.
    Phase.MODULE_REJECTED: frozenset({Phase.DRIVER_INSTALLED, Phase.REBOOTING}),
}


class InvalidTransition(Exception):
    """A phase change the table does not allow."""

    def __init__(self, current: Phase, target: Phase) -> None:
        allowed = ", ".join(sorted(p.value for p in ALLOWED[current])) or "nothing"
        super().__init__(
            f"cannot go from {current.value} to {target.value} (allowed from "
            f"{current.value}: {allowed})"
        )
        self.current = current
        self.target = target


def transition(current: Phase, target: Phase) -> Phase:
    """Return ``target`` if the table allows ``current -> target``.

    Raises:
        InvalidTransition: the move is not in ``ALLOWED``.
    """
    if target not in ALLOWED[current]:
        raise InvalidTransition(current, target)
    return target
