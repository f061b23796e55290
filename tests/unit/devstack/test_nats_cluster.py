"""The embedded cluster's layout and configuration, before anything starts: which sizes it
takes, each member's own ports and store, one CA for all, routes to the others that
authenticate by mutual TLS, and clients given every member's URL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockstep_common.bus_access import Permissions
from lockstep_devstack.nats import ClusterRole
from lockstep_devstack.nats_cluster import NatsCluster, check_size
from lockstep_devstack.tls import server_tls

pytestmark = pytest.mark.unit
ACCESS = {"cli": Permissions(publish=("lockstep.>",), subscribe=("_INBOX_cli.>",))}


@pytest.mark.parametrize("size", [3, 5, 7])
def test_an_odd_size_of_three_or_more_is_taken(size: int) -> None:
    check_size(size)


@pytest.mark.parametrize("size", [-1, 0, 1, 2, 4, 6])
def test_any_other_size_is_refused_naming_the_rule(size: int) -> None:
    with pytest.raises(ValueError, match="needs an odd number of servers, 3 or more"):
        check_size(size)


def test_members_have_their_own_ports_store_and_name_and_share_one_ca(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path / "nats", 3, access=ACCESS, secrets_dir=tmp_path)
    members = cluster.members
    ports = [m.port for m in members]
    assert [m.monitor_port for m in members] == [None] * 3  # no unauthenticated monitor
    assert members[0].cluster is not None
    routes = [m.cluster.port for m in members if m.cluster is not None]
    assert len(set(ports + routes)) == 6
    assert {m.name for m in members} == {"lockstep-1", "lockstep-2", "lockstep-3"}
    assert len({m.data_dir for m in members}) == 3
    assert {m.ca_file for m in members} == {cluster.ca_file}
    for m in members:  # each routes to the two others, never to itself
        assert m.cluster is not None
        assert sorted(m.cluster.routes) == sorted(set(routes) - {m.cluster.port})
    client = cluster.client("cli")
    assert client.servers == tuple(m.url for m in members)
    assert cluster.url.split(",") == [f"tls://127.0.0.1:{m.port}" for m in members]
    assert client.ca_file == cluster.ca_file and client.user == "cli"


def test_secure_routes_verify_each_other_against_the_ca_and_hold_no_secret(
    tmp_path: Path,
) -> None:
    tls = server_tls(tmp_path / "tls")
    text = ClusterRole("lockstep", 6222, (6223, 6224), secure=True).config(tls)
    block = json.loads(text.removeprefix("cluster: "))
    assert block["routes"] == ["nats-route://127.0.0.1:6223", "nats-route://127.0.0.1:6224"]
    assert block["listen"] == "127.0.0.1:6222"
    assert block["tls"] == {
        "cert_file": str(tls.cert),
        "key_file": str(tls.key),
        "ca_file": str(tls.ca),
        "verify": True,  # a route without a certificate from this CA is refused
        "timeout": 5,
    }
    assert "authorization" not in block and "@" not in text  # no password in a route URL


def test_an_open_cluster_has_plain_routes(tmp_path: Path) -> None:
    block = json.loads(ClusterRole("lockstep", 6222, (6223,)).config(None).split(": ", 1)[1])
    assert "tls" not in block
    with pytest.raises(ValueError, match="secure routes need"):
        ClusterRole("lockstep", 6222, (6223,), secure=True).config(None)
