"""The embedded nats-server: a client port taken between choosing it and binding it; the
embedded cluster's routes."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import tempfile
import urllib.request
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
    url = f"http://127.0.0.1:{server.monitor_port}/routez"
    with urllib.request.urlopen(url, timeout=2) as resp:
        return {r["remote_name"] for r in json.load(resp)["routes"]}


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
