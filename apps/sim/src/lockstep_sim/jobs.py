"""Update and activation jobs run as asyncio tasks behind a Redfish Task, with the task faults.

Timing: each component class carries real BMC minutes (``profiles``), slept as
``minutes * time_scale`` seconds. Jobs on one BMC hold its flash lock, so back-to-back updates
serialize (seed 000: staging and activation run back-to-back today); a ``Stage`` push releases the
lock after staging, and the later ``Activate`` takes it again for the activation only.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from lockstep_common.versions import compare_versions
from lockstep_sim.errors import message
from lockstep_sim.tasks import Task
from lockstep_sim.update_service import UpdateOptions

if TYPE_CHECKING:
    from lockstep_sim.bmc import Bmc

STEPS = 4  # progress updates per phase


async def _progress(bmc: Bmc, task: Task, minutes: float, start: int, end: int) -> None:
    for step in range(1, STEPS + 1):
        await asyncio.sleep(minutes * bmc.time_scale / STEPS)
        task.percent = max(task.percent, start + (end - start) * step // STEPS)


def _fail(task: Task, name: str, text: str, args: tuple[str, ...]) -> None:
    task.messages.append(message(name, text, args))
    task.finish("Exception")


async def _stage(bmc: Bmc, task: Task, member_id: str, start: int, end: int) -> bool:
    """Write the image; False when a fault ended the task (in ``Exception``)."""
    minutes = bmc.node.components[member_id].cls.stage_minutes
    stuck = bmc.fault("task_stuck", member_id)
    if stuck is not None:  # reliability.md 7.D3: a task stuck at N% until the fault is cleared
        task.percent = stuck.percent
        await bmc.faults.wait_cleared(stuck)
    reboot = bmc.fault("bmc_reboot_mid_task", member_id)
    if reboot is not None:  # 7.D2: the BMC reboots mid-task and is unreachable for minutes
        await _progress(bmc, task, minutes / 2, start, (start + end) // 2)
        bmc.go_offline(reboot.duration_minutes * bmc.time_scale)
        if reboot.forget_state:
            bmc.forget_state()
        await asyncio.sleep(reboot.duration_minutes * bmc.time_scale)
        if not reboot.resume:
            text = f"The BMC restarted while updating {member_id}."
            _fail(task, "ApplyFailed", text, ("", member_id))
            return False
        minutes /= 2
        start = (start + end) // 2
    await _progress(bmc, task, minutes, start, end)
    if bmc.fault("failed_flash", member_id) is not None:
        _fail(task, "ApplyFailed", f"Writing the image to {member_id} failed.", ("", member_id))
        return False
    return True


async def _activation(bmc: Bmc, task: Task, member_id: str, start: int, end: int) -> None:
    component = bmc.node.components[member_id]
    if component.cls.kind == "bmc":  # the BMC resets itself and refuses connections meanwhile
        bmc.go_offline(component.cls.activate_minutes * bmc.time_scale)
    await _progress(bmc, task, component.cls.activate_minutes, start, end)
    flip(bmc, member_id)


async def update(bmc: Bmc, task: Task, plan: dict[str, str], options: UpdateOptions) -> None:
    task.state = "Pending"
    async with bmc.flash_lock:
        task.state = "Running"
        await _update(bmc, task, plan, options)


async def _update(bmc: Bmc, task: Task, plan: dict[str, str], options: UpdateOptions) -> None:
    # A dialect whose BMC runs a new image only after a reset writes it now and waits for it.
    at_reset = options.apply_time == "OnReset" or bool(bmc.dialect.activation_reset)
    activate = not options.stage and not at_reset
    for member_id in plan:
        task.messages.append(message("TargetDetermined", f"{member_id} selected.", (member_id,)))
    span = 100 // max(len(plan), 1)
    for n, (member_id, target) in enumerate(plan.items()):
        component = bmc.node.components[member_id]
        text = f"Image {target} is being transferred to {member_id}."
        task.messages.append(message("TransferringToComponent", text, (target, member_id)))
        if not await _stage(bmc, task, member_id, n * span, n * span + span // 2):
            return
        wrong = bmc.fault("wrong_version", member_id)
        version = target  # unless the device reports a version other than the one flashed:
        if wrong is not None:
            version = wrong.version or f"{target}-unexpected"
        if not component.banks:  # one-way part: the write is the activation (seed 000 PSU/BBU)
            old, component.version = component.version, version
            minutes = component.cls.activate_minutes
            await _progress(bmc, task, minutes, n * span + span // 2, (n + 1) * span)
            activated(bmc, member_id, old)
            continue
        component.inactive_version, component.staged = version, True
        if activate:
            await _activation(bmc, task, member_id, n * span + span // 2, (n + 1) * span)
        else:
            if at_reset and not options.stage:
                bmc.pending_reset.append(member_id)
            text = f"Awaiting activation of {member_id}."
            task.messages.append(message("AwaitToActivate", text, (member_id,)))
    if not plan:
        task.messages.append(message("Success", "Nothing to update: same versions."))
    task.messages.append(message("UpdateSuccessful", "Update completed.", ("all", "")))
    task.finish("Completed")


async def activate(bmc: Bmc, task: Task, members: list[str]) -> None:
    task.state = "Pending"
    async with bmc.flash_lock:
        task.state = "Running"
        for n, member_id in enumerate(members):
            start, end = 100 * n // len(members), 100 * (n + 1) // len(members)
            await _activation(bmc, task, member_id, start, end)
        task.messages.append(message("Success", "Activation completed."))
        task.finish("Completed")


def flip(bmc: Bmc, member_id: str) -> None:
    """Switch the active bank to the staged one (A/B flip)."""
    component = bmc.node.components[member_id]
    old = component.version
    if component.inactive_version is not None:
        component.version, component.inactive_version = component.inactive_version, old
    component.staged = False
    activated(bmc, member_id, old)


def activated(bmc: Bmc, member_id: str, old: str) -> None:
    """Faults that show after a new image became active."""
    component = bmc.node.components[member_id]
    if bmc.fault("bricked", member_id) is not None:
        component.bricked = True
    if bmc.fault("degrade_health", member_id, image=component.version) is not None:
        # Read by the node agents (lockstep_sim.agents) to report degraded in-band health.
        bmc.node.degraded_after_activation = True
    elif component.cls.kind == "gpu" and (compare_versions(component.version, old) or 0) < 0:
        # Back on an older image (a flip-back's forced downgrade of the one that degraded it).
        bmc.node.degraded_after_activation = False
    revert = bmc.fault("silent_revert", member_id)
    if revert is not None:  # reports success, then quietly boots the old image again
        new = component.version

        def _revert() -> None:
            if component.version == new:
                component.version = old
                if component.banks:
                    component.inactive_version = new
                note = {"fault": "silent_revert_applied", "component": member_id}
                bmc.record("fault", kind="fault", **note)

        delay = revert.delay_minutes * bmc.time_scale
        bmc.timers.append(asyncio.get_running_loop().call_later(delay, _revert))
