"""The in-band driver unit as a pure decision: given what the node agent reads now, the next
call to make (or the end reached).

Seed 004 (the GSP / driver mismatch runbook) is the procedure: reinstall the pinned driver
branch as one unit (driver, GSP firmware, CUDA user space, NCCL pairing and fabric manager come
from one package: "GSP firmware ships inside the driver package and is not versioned
separately"), rebuild DKMS against the kernel that boots, reboot, then verify that the loaded
module and the GSP firmware agree and the diagnostic (``dcgmi diag -r 1``) passes. The same unit
is a rollout's in-band step (issue 12 item 2) and the whole of the runbook's repair.

Every call is decided from a fresh read (design.md non-negotiable 4: read before write), so a
re-run after a crash continues where the node is instead of starting again: a driver already
installed and built is rebooted, not reinstalled (the agent's ledger shows one install).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lockstep_common.versions import DOT_INTEGER, newest
from lockstep_common.vocabulary import Component

IN_BAND = frozenset(
    {
        Component.DRIVER,
        Component.CUDA,
        Component.NCCL,
        Component.FABRIC_MANAGER,
    }
)
"""Components installed through the node agent, as one driver package unit."""

INSTALLED = frozenset({"driver_installed", "dkms_built", "dkms_failed"})
"""Agent phases in which a driver package is on disk and its module not yet booted."""


@dataclass(frozen=True, slots=True)
class AgentState:
    """What the node agent reads on the node (its ``read-state``)."""

    phase: str
    driver: str
    """Installed driver package version."""
    loaded_module: str | None
    """``/sys/module/nvidia/version``; None when no module is loaded."""
    gsp_firmware: str | None
    firmware_dirs: tuple[str, ...]
    """Versions under ``/lib/firmware/nvidia/``."""
    dkms: str
    cuda: str
    nccl: str
    fabric_manager: str | None
    module_rejected: bool
    """Secure Boot refused the module at the last boot ("module verification failed")."""
    diag_passed: bool
    """``dcgmi diag -r 1`` passes (NVML, CUDA, every GPU enumerated)."""

    def runs(self, version: str) -> bool:
        """Seed 004 "Verification": the module of ``version`` loaded, the GSP firmware of the
        same version from its own ``/lib/firmware/nvidia/<version>/``, and the diagnostic
        passes."""
        return (
            self.phase == "ready"
            and self.loaded_module == version
            and self.gsp_firmware == version
            and version in self.firmware_dirs
            and self.diag_passed
        )

    def versions(self) -> dict[str, str | None]:
        """The in-band components' versions as read (device events' from/to versions)."""
        return {
            Component.DRIVER.value: self.loaded_module,
            Component.CUDA.value: self.cuda,
            Component.NCCL.value: self.nccl,
            Component.FABRIC_MANAGER.value: self.fabric_manager,
        }


class Call(enum.StrEnum):
    """What to do next in the unit."""

    INSTALL = "install"
    REBUILD = "rebuild"
    REBOOT = "reboot"
    WAIT = "wait"
    """The node is rebooting: read again later."""
    VERIFIED = "verified"
    """The version runs and the diagnostic passes."""
    FAILED = "failed"
    """This attempt did not come up clean (DKMS failed twice, mismatch after the reboot)."""
    SECURE_BOOT = "secure_boot"
    """Secure Boot refused the module: not this runbook; stop, never retry."""
    UNKNOWN = "unknown"
    """A call recorded as sent shows no effect: never sent again, the node stops."""


@dataclass(frozen=True, slots=True)
class Next:
    call: Call
    reason: str = ""


def next_call(state: AgentState, version: str, sent: Mapping[str, Any]) -> Next:
    """The next call of the unit that installs ``version``; ``sent`` holds which calls of
    this attempt were recorded as sent (``install``, ``rebuild``, ``reboot``). The first rule
    that answers wins."""
    for rule in (_settled, _on_disk, _after_sent):
        found = rule(state, version, sent)
        if found is not None:
            return found
    return Next(Call.INSTALL)


def _settled(state: AgentState, version: str, sent: Mapping[str, Any]) -> Next | None:
    """Secure Boot refused the module, the version runs clean, or the node is rebooting."""
    if state.module_rejected or state.phase == "module_rejected":
        return Next(
            Call.SECURE_BOOT,
            "Secure Boot rejected the nvidia module (module verification failed): a signing "
            "problem, not a GSP mismatch (seed 004 'Not this runbook'); sign the module or "
            "enroll a MOK; not retried",
        )
    if state.runs(version):
        return Next(Call.VERIFIED)
    if state.phase == "rebooting":
        return Next(Call.WAIT, "the node is rebooting")
    return None


def _on_disk(state: AgentState, version: str, sent: Mapping[str, Any]) -> Next | None:
    """The package of ``version`` is installed and not yet booted: build, then reboot."""
    if state.driver != version or state.phase not in INSTALLED:
        return None
    if state.phase == "driver_installed":
        return Next(Call.REBUILD)
    if state.phase == "dkms_failed":
        if sent.get("rebuild"):
            return Next(Call.FAILED, f"the DKMS build of {version} failed (forced once)")
        return Next(Call.REBUILD)  # seed 004 step 5: force the build once
    if sent.get("reboot"):
        return Next(
            Call.UNKNOWN, f"reboot into {version} recorded as sent but none seen; not sent again"
        )
    return Next(Call.REBOOT)


def _after_sent(state: AgentState, version: str, sent: Mapping[str, Any]) -> Next | None:
    """Calls recorded as sent that the node does not show as a clean boot of ``version``."""
    if sent.get("reboot"):
        why = (
            f"no /lib/firmware/nvidia/{version}/ for the loaded module (GSP mismatch)"
            if state.phase == "gsp_mismatch"
            else f"after the reboot: phase {state.phase}, module {state.loaded_module}, "
            f"GSP {state.gsp_firmware}, diagnostic {'passed' if state.diag_passed else 'failed'}"
        )
        return Next(Call.FAILED, f"{version} did not come up clean: {why}")
    if sent.get("install"):
        return Next(
            Call.UNKNOWN,
            f"install of {version} recorded as sent but the agent shows none "
            f"(phase {state.phase}, driver {state.driver}); not sent again",
        )
    return None


def fallback_for(state: AgentState, target: str) -> str | None:
    """The previous known-good branch (seed 004 "Rollback"): a version whose GSP firmware
    directory the node still holds, other than the target's (the newest, in the one version
    ordering); None if none, or if the candidates cannot be ordered (no guessing which branch
    is newer). A loaded module without its directory is the broken half, never a fallback."""
    return newest((v for v in state.firmware_dirs if v != target), DOT_INTEGER)
