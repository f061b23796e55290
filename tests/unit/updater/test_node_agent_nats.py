"""The NATS node agent adapter's own rules, without a server: which channel a call takes (a
read its short one), the command ids it derives, and what an answer's status means."""

from __future__ import annotations

import pytest

from lockstep_common.events.v1 import NodeCommandAnswered, NodeCommandRequested, NodeReading
from lockstep_updater.adapters.agent_commands import NatsAgentCommands
from lockstep_updater.adapters.node_agent_nats import NatsNodeAgent
from lockstep_updater.ports import AgentOrder, AgentOutcomeUnknown, AgentRefused

pytestmark = pytest.mark.unit
READING = NodeReading(phase="ready", driver="580.65.06", dkms="built", cuda="13.0", nccl="2.27")
ORDER = AgentOrder("s1", "n1", "42", 7, "target", "a" * 64)


class Channel(NatsAgentCommands):
    """Answers every command with ``status``; records what it was sent."""

    def __init__(self, status: str = "done") -> None:  # no connection: command() is replaced
        self.status = status
        self.sent: list[NodeCommandRequested] = []

    async def command(self, cmd: NodeCommandRequested) -> NodeCommandAnswered:
        self.sent.append(cmd)
        status = "done" if cmd.action == "read-state" else self.status
        return NodeCommandAnswered.model_validate(
            {"command_id": cmd.command_id, "status": status, "state": READING}
        )


async def test_reads_take_the_read_channel_and_calls_carry_order_digest_and_derived_id() -> None:
    commands, reads = Channel(), Channel()
    state = await NatsNodeAgent(commands, "nvidia-open", reads).install_driver(ORDER, "580.65.06")
    assert state.phase == "ready"
    (install,) = commands.sent
    assert (install.command_id, install.work_item, install.fencing_token) == (
        "42-target-install-driver",
        "42",
        7,
    )
    assert (install.package, install.version, install.package_sha256) == (
        "nvidia-open",
        "580.65.06",
        "a" * 64,
    )
    assert [c.action for c in reads.sent] == ["read-state"]
    assert reads.sent[0].package_sha256 is None  # a read names no package


@pytest.mark.parametrize(
    ("status", "error"),
    [("refused", AgentRefused), ("interrupted", AgentOutcomeUnknown)],
)
async def test_a_refused_or_interrupted_answer_is_an_error_of_its_kind(
    status: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await NatsNodeAgent(Channel(status)).reboot(ORDER)


async def test_a_failed_call_is_left_for_the_next_read_to_judge() -> None:
    state = await NatsNodeAgent(Channel("failed")).rebuild_dkms(ORDER)
    assert state.dkms == "built"
