"""In-band commands over NATS (``node.command``) on a real nats-server with the generated
permissions (``bus_permissions``) and enrolled agents' nkeys: the updater's request reaches the
node's agent and the executor's outcome comes back; a repeated command id runs once; a lapsed
fencing token is refused; no other identity may send a command, and no other node's agent may
hear one; ``lockstep-agent run`` answers commands."""

from __future__ import annotations

import asyncio
import shutil
import signal
import tempfile
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from lockstep_agent.command_channel import CommandChannel
from lockstep_agent.commands import Executor
from lockstep_cli.polling import until
from lockstep_common import natsconn, subjects
from lockstep_common.envelope import make_envelope, source_of
from lockstep_common.events.v1 import NodeCommandRequested
from lockstep_common.identities import agent_identity
from lockstep_common.provenance import UPDATER
from lockstep_devstack import agents
from lockstep_devstack.nats import NatsServer
from lockstep_updater.adapters.agent_commands import NatsAgentCommands
from lockstep_updater.ports import AgentOutcomeUnknown, AgentRefused, AgentUnavailable
from tests.integration.agent.test_agent_restart import (
    NODE,
    NS,
    SITE,
    _config,
    _server,
    _start,
    _topology,
)

pytestmark = pytest.mark.integration
OTHER = "gpu-0002"


class RecordingHost:
    """Runs nothing; records what it was asked to run (a rebuild that succeeds), once
    ``finish`` is set (set from the start unless a test holds a command running)."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, ...]] = []
        self.finish = threading.Event()
        self.finish.set()

    def run(self, argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str]:
        self.ran.append(tuple(argv))
        self.finish.wait(timeout=60)
        return 0, ""


class Stack:
    def __init__(self, base: Path, server: NatsServer) -> None:
        self.base, self.server = base, server
        self.host = RecordingHost()
        self.errors: dict[str, list[str]] = {}
        self._conns: list[NatsClient] = []
        self.sub: Subscription | None = None

    async def connect(self, identity: str) -> NatsClient:
        seen = self.errors.setdefault(identity, [])

        async def on_error(exc: Exception) -> None:
            seen.append(str(exc))

        nc = await natsconn.connect(
            self.server.client(identity), name=f"test-{identity}", error_cb=on_error
        )
        self._conns.append(nc)
        return nc

    async def agent(self, node: str = NODE, copy: int = 0) -> Executor:
        journal = self.base / node / str(copy) / "commands.sqlite"
        executor = Executor(journal, self.host, manager="apt")
        self.sub = await CommandChannel(executor, NS, SITE, node).subscribe(
            await self.connect(agent_identity(node))
        )
        return executor

    async def updater(self) -> NatsAgentCommands:
        nc = await self.connect(UPDATER)
        return NatsAgentCommands(nc, NS, source_of(UPDATER), timeout_s=30)

    async def close(self) -> None:
        for nc in self._conns:
            await nc.close()


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    base = Path(tempfile.mkdtemp(prefix="lockstep-agent-commands-"))
    server = _server(base)  # enrols NODE
    agents.enroll(base, {OTHER: SITE})
    server.start(timeout_s=30)
    s = Stack(base, server)
    try:
        yield s
    finally:
        await s.close()
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def _rebuild(command_id: str = "c-1", token: int = 7, node: str = NODE) -> NodeCommandRequested:
    return NodeCommandRequested(
        site=SITE,
        node_id=node,
        command_id=command_id,
        action="rebuild-dkms",
        work_item="wi-1",
        fencing_token=token,
    )


async def test_the_updaters_command_runs_on_the_node_and_its_outcome_comes_back(
    stack: Stack,
) -> None:
    await stack.agent()
    answer = await (await stack.updater()).command(_rebuild())
    assert (answer.command_id, answer.status) == ("c-1", "done")
    assert answer.ran == (("dkms", "autoinstall"),)
    assert stack.host.ran == [("dkms", "autoinstall")]


async def test_a_repeated_command_id_runs_once(stack: Stack) -> None:
    await stack.agent()
    updater = await stack.updater()
    first = await updater.command(_rebuild())
    again = await updater.command(_rebuild())
    assert again == first
    assert stack.host.ran == [("dkms", "autoinstall")]


async def test_a_repeat_sent_while_the_command_runs_waits_for_it_and_it_runs_once(
    stack: Stack,
) -> None:
    await stack.agent()
    updater = await stack.updater()
    stack.host.finish.clear()
    first = asyncio.create_task(updater.command(_rebuild()))

    async def running() -> bool:
        return bool(stack.host.ran)

    await until(running, what="the first command running")
    again = asyncio.create_task(updater.command(_rebuild()))

    async def queued() -> bool:
        return stack.sub is not None and stack.sub.pending_msgs >= 1

    await until(queued, what="the repeat waiting at the agent")
    stack.host.finish.set()
    answers = await asyncio.gather(first, again)
    assert answers[0] == answers[1]
    assert answers[0].status == "done"  # not "interrupted": it was still running
    assert stack.host.ran == [("dkms", "autoinstall")]


async def test_an_agent_that_does_not_answer_in_time_leaves_the_outcome_unknown(
    stack: Stack,
) -> None:
    await stack.agent()
    stack.host.finish.clear()
    updater = NatsAgentCommands(await stack.connect(UPDATER), NS, source_of(UPDATER), timeout_s=1)
    try:
        with pytest.raises(AgentOutcomeUnknown, match="ask again with the same command id"):
            await updater.command(_rebuild())
    finally:
        stack.host.finish.set()
    assert stack.host.ran == [("dkms", "autoinstall")]  # it did run: unknown, not "not sent"


async def test_two_agent_processes_of_one_node_run_a_command_once(stack: Stack) -> None:
    """A restarted agent overlapping the old process: each command goes to one of them."""
    await stack.agent(copy=0)
    await stack.agent(copy=1)
    updater = await stack.updater()
    for n in range(6):
        assert (await updater.command(_rebuild(f"c-{n}"))).status == "done"
    assert stack.host.ran == [("dkms", "autoinstall")] * 6


async def test_a_lapsed_fencing_token_is_refused_and_nothing_runs(stack: Stack) -> None:
    await stack.agent()
    updater = await stack.updater()
    await updater.command(_rebuild("c-new", token=8))
    stale = await updater.command(_rebuild("c-old", token=7))
    assert stale.status == "refused"
    assert "fencing token 7 of work item wi-1 has lapsed" in stale.detail
    assert stack.host.ran == [("dkms", "autoinstall")]


async def test_an_undecodable_command_is_refused_by_name_and_nothing_runs(stack: Stack) -> None:
    await stack.agent()
    nc = await stack.connect("updater")
    subject = NS.wire(subjects.node_command(SITE, NODE))
    reply = await nc.request(subject, b'{"not": "an envelope"}', timeout=30)
    assert reply.headers is not None and reply.headers["Lockstep-Error"]
    assert stack.host.ran == []


async def test_a_command_naming_another_node_or_sender_is_refused_and_nothing_runs(
    stack: Stack,
) -> None:
    await stack.agent()
    nc = await stack.connect(UPDATER)
    subject = NS.wire(subjects.node_command(SITE, NODE))
    for env, why in (
        (make_envelope(_rebuild(node=OTHER), source=source_of(UPDATER)), "belongs on"),
        (make_envelope(_rebuild(), source=source_of("cli")), "only /lockstep/updater"),
    ):
        reply = await nc.request(subject, env.to_json(), timeout=30)
        assert reply.headers is not None and why in reply.headers["Lockstep-Error"]
    assert stack.host.ran == []


async def test_no_agent_listening_is_unavailable_not_an_outcome(stack: Stack) -> None:
    with pytest.raises(AgentUnavailable, match=f"no agent of {NODE} listens"):
        await (await stack.updater()).command(_rebuild())


async def test_another_nodes_agent_cannot_hear_this_nodes_commands(stack: Stack) -> None:
    nc = await stack.connect(agent_identity(OTHER))
    subject = NS.wire(subjects.node_command(SITE, NODE))

    async def heard(msg: Msg) -> None:
        stack.host.run(("heard", msg.subject))

    await nc.subscribe(subject, cb=heard)
    await nc.flush()

    async def refused() -> bool:
        return any(
            "permissions violation for subscription" in e.lower()
            for e in stack.errors[agent_identity(OTHER)]
        )

    await until(refused, what="the server refusing the subscription", timeout_s=30)
    # Nobody holds NODE's subject: the updater's command is not delivered to anyone.
    with pytest.raises(AgentUnavailable):
        await (await stack.updater()).command(_rebuild())
    assert stack.host.ran == []


@pytest.mark.parametrize("identity", ["cli", "planner", "reader", agent_identity(OTHER)])
async def test_only_the_updater_may_send_a_command(stack: Stack, identity: str) -> None:
    await stack.agent()
    nc = await stack.connect(identity)
    subject = NS.wire(subjects.node_command(SITE, NODE))
    forged = make_envelope(_rebuild("c-forged"), source=f"test/{identity}")
    await nc.publish(subject, forged.to_json(), reply=nc.new_inbox())
    await nc.flush()

    async def refused() -> bool:
        return any("permissions violation for publish" in e.lower() for e in stack.errors[identity])

    await until(refused, what=f"the server refusing {identity}'s command", timeout_s=30)
    # The agent heard nothing of it: the updater's next command is the first it runs.
    answer = await (await stack.updater()).command(_rebuild())
    assert answer.status == "done"
    assert stack.host.ran == [("dkms", "autoinstall")]


async def test_the_running_agent_answers_commands(stack: Stack) -> None:
    """``lockstep-agent run`` (the real process, its real executor): a command the executor
    refuses before running anything (an install without the attested package) comes back."""
    await _topology(stack.server)
    log = stack.base / "agent.log"
    proc = _start(_config(stack.base, stack.server), log)
    try:
        updater = await stack.updater()
        bad = NodeCommandRequested(
            site=SITE,
            node_id=NODE,
            command_id="c-install",
            action="install-driver",
            work_item="wi-1",
            fencing_token=1,
        )

        async def answered() -> str | None:
            try:
                return (await updater.command(bad)).detail
            except AgentUnavailable:  # not subscribed yet
                return None

        detail = await until(answered, what="the agent answering", timeout_s=60)
        assert detail == "install-driver needs package, version and package_sha256"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_a_malformed_answer_is_refused(stack: Stack) -> None:
    """An answer that is not this command's outcome is not taken for one."""
    nc = await stack.connect(agent_identity(NODE))
    subject = NS.wire(subjects.node_command(SITE, NODE))

    async def wrong(msg: Msg) -> None:
        await nc.publish(msg.reply, b"{}")

    await nc.subscribe(subject, cb=wrong)
    await nc.flush()
    with pytest.raises(AgentRefused, match="unexpected answer"):
        await (await stack.updater()).command(_rebuild())
