"""The embedded nats-server: a client port taken between choosing it and binding it; the
embedded cluster's routes."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import tempfile
from pathlib import Path

from lockstep_common.bus_access import Permissions
from lockstep_devstack.nats import NatsServer, nats_server_binary
from lockstep_devstack.nats_cluster import NatsCluster
from lockstep_devstack.process import spawn, stop, wait_until


def test_a_port_taken_between_choosing_it_and_binding_it_is_chosen_again() -> None:
    base = Path(tempfile.mkdtemp(prefix="lockstep-nats-race-"))
    server = NatsServer(base / "nats", sync_always=False)
    chosen = server.port
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", chosen))
        squatter.listen()
        try:
            server.start(timeout_s=30)
            assert server.port != chosen
            assert f":{server.port}" in server.url
        finally:
            server.stop()
            shutil.rmtree(base, ignore_errors=True)


def _route_names(server: NatsServer) -> set[str]:
    return {r["remote_name"] for r in server.monitor("ROUTEZ")["routes"]}


def test_a_secured_server_serves_no_unauthenticated_monitor_but_answers_its_system_account(
    tmp_path: Path,
) -> None:
    """The HTTP monitor authenticates nobody: ``/connz`` listed every user and subscription
    to anyone on the machine (issue 26). A secured server does not serve it; its health and
    connections are asked for as the system account's user, over TLS."""
    access = {"cli": Permissions(publish=("lockstep.>",), subscribe=("_INBOX_cli.>",))}
    server = NatsServer(tmp_path / "nats", sync_always=False, access=access, secrets_dir=tmp_path)
    server.start()
    try:
        assert server.proc is not None
        log = server.log_path.read_text(errors="replace")
        assert "monitor" not in log.lower(), log  # "Starting http monitor on ..." before
        assert "http:" not in (server.data_dir / "nats-server.conf").read_text()
        assert listening_ports(server.proc.pid) == {server.port}
        assert server.monitor("HEALTHZ", {"js-enabled-only": True})["status"] == "ok"
        assert server.monitor("CONNZ")["num_connections"] >= 0
    finally:
        server.stop()


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its sockets' inodes in /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = str(fd.readlink())
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_cluster_members_route_to_each_other_and_a_server_without_the_certificate_is_refused(
    tmp_path: Path,
) -> None:
    base = tmp_path / "stack"
    access = {"cli": Permissions(publish=("lockstep.>",), subscribe=("_INBOX_cli.>",))}
    cluster = NatsCluster(base / "nats", 3, sync_always=False, access=access, secrets_dir=base)
    cluster.start()
    intruder = None
    try:
        first = cluster.members[0]
        assert _route_names(first) == {"lockstep-2", "lockstep-3"}
        assert first.cluster is not None
        # Another local server routing to a member, without TLS: it must not join, or it
        # would read every subject past the clients' authorization.
        log = tmp_path / "intruder.log"
        intruder = spawn(
            [
                nats_server_binary(),
                "-p",
                "-1",
                "-cluster",
                "nats://127.0.0.1:-1",
                "-routes",
                f"nats-route://127.0.0.1:{first.cluster.port}",
            ],
            log_path=log,
            parent_death_signal=signal.SIGKILL,
        )
        wait_until(
            lambda: "TLS route handshake error" in first.log_path.read_text(errors="replace"),
            timeout_s=30,
            what="the member refusing the intruder's route",
            proc=first.proc or intruder,
            log_path=first.log_path,
        )
        assert _route_names(first) == {"lockstep-2", "lockstep-3"}
    finally:
        if intruder is not None:
            stop(intruder, signal.SIGKILL)
        cluster.stop()
