"""The ``NodeAgent`` port over NATS: each call one ``node.command`` to the node's own agent
(``lockstep_agent``), on ``agent.command.<site>.<node>`` (``adapters.agent_commands``).

The channel is the server's to authenticate: only the updater's identity may publish there and
only ``agent-<node>`` may hear it (``bus_access``), so no credential travels. Every command
carries the order's work item and fencing token (the agent refuses a lapsed one) and a command
id derived from the work item, the attempt and the call (``AgentOrder.command_id``): a call
re-sent after a crash carries the id it had, and the agent answers it from its journal instead
of running it twice. ``install-driver`` carries the attested package's SHA-256; the agent
downloads the exact version and refuses bytes with another digest. ``state`` is the agent's
``read-state``: what it reads on the node now.

What an answer means here: ``done`` is the call carried out (the state read after it is
returned); ``refused`` (a lapsed fence, a digest that is not the attested one, a command id
reused) is ``AgentRefused``, never retried; ``failed`` leaves the node for the next read to
judge (a failed DKMS build is a phase the runbook decides on, not an error of the channel);
``interrupted`` (the agent stopped while it ran) is ``AgentOutcomeUnknown``: the next run reads
what the node shows.
"""

from __future__ import annotations

from typing import Literal

from lockstep_common.events.v1 import NodeCommandAnswered, NodeCommandRequested
from lockstep_updater.adapters.agent_commands import NatsAgentCommands
from lockstep_updater.domain.inband import AgentState
from lockstep_updater.ports import (
    AgentOrder,
    AgentOutcomeUnknown,
    AgentRefused,
    AgentUnavailable,
)

Action = Literal["install-driver", "rebuild-dkms", "reboot", "read-state"]
DEFAULT_PACKAGE = "nvidia-driver"
READ_TIMEOUT_S = 30.0


class NatsNodeAgent:
    """``NodeAgent`` through ``commands`` (the updater's connection); ``package``: the driver
    package's name in the nodes' repositories (``apt-get download <package>=<version>``);
    ``reads``: the same channel with the timeout of a read (default: ``commands``'), so that an
    agent that does not answer a read holds a worker seconds, not a package manager's 30
    minutes."""

    def __init__(
        self,
        commands: NatsAgentCommands,
        package: str = DEFAULT_PACKAGE,
        reads: NatsAgentCommands | None = None,
    ) -> None:
        self._commands = commands
        self._package = package
        self._reads = reads or commands

    async def state(self, order: AgentOrder) -> AgentState:
        answer = await self._ask(order, "read-state")
        if answer.status != "done" or answer.state is None:
            raise AgentRefused(
                f"agent of {order.node_id} could not read the node: {answer.status}: "
                f"{answer.detail or 'no state'}"
            )
        return as_state(answer)

    async def install_driver(self, order: AgentOrder, version: str) -> AgentState:
        if order.package_sha256 is None:
            raise AgentRefused(
                f"no attested package for driver {version} ({order.attempt}): the agent "
                "installs only bytes an attested bundle names"
            )
        await self._carry_out(order, "install-driver", version=version)
        return await self._after(order, "install-driver")

    async def rebuild_dkms(self, order: AgentOrder) -> AgentState:
        await self._carry_out(order, "rebuild-dkms")
        return await self._after(order, "rebuild-dkms")

    async def reboot(self, order: AgentOrder) -> AgentState:
        await self._carry_out(order, "reboot")
        return await self._after(order, "reboot")

    async def _after(self, order: AgentOrder, action: str) -> AgentState:
        # The call was taken: a read that fails now (a reboot under way) must not read as
        # "not sent", or the step would send it again.
        try:
            return await self.state(order)
        except AgentUnavailable as exc:
            raise AgentOutcomeUnknown(f"{action} on {order.node_id} taken; then: {exc}") from None

    async def _carry_out(
        self, order: AgentOrder, action: Action, version: str | None = None
    ) -> NodeCommandAnswered:
        answer = await self._ask(order, action, version)
        if answer.status == "refused":
            raise AgentRefused(f"agent of {order.node_id} refused {action}: {answer.detail}")
        if answer.status == "interrupted":
            raise AgentOutcomeUnknown(
                f"{action} on {order.node_id} was interrupted: {answer.detail}"
            )
        return answer  # done, or failed: the next read says what the node shows

    async def _ask(
        self, order: AgentOrder, action: Action, version: str | None = None
    ) -> NodeCommandAnswered:
        # A read is never journaled by the agent; its id need not be unique.
        installs = action == "install-driver"
        channel = self._reads if action == "read-state" else self._commands
        return await channel.command(
            NodeCommandRequested(
                site=order.site,
                node_id=order.node_id,
                command_id=order.command_id(action),
                action=action,
                work_item=order.work_item,
                fencing_token=order.fencing_token,
                package=self._package if installs else None,
                version=version,
                package_sha256=order.package_sha256 if installs else None,
            )
        )


def as_state(answer: NodeCommandAnswered) -> AgentState:
    """The agent's reading as the domain's ``AgentState``."""
    read = answer.state
    assert read is not None  # noqa: S101 - the caller checked
    return AgentState(
        phase=read.phase,
        driver=read.driver,
        loaded_module=read.loaded_module,
        gsp_firmware=read.gsp_firmware,
        firmware_dirs=tuple(read.firmware_dirs),
        dkms=read.dkms,
        cuda=read.cuda,
        nccl=read.nccl,
        fabric_manager=read.fabric_manager,
        module_rejected=read.module_rejected,
        diag_passed=read.diag_passed,
    )
