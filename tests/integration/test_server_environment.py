"""The embedded servers are started with only what they need of the operator's environment
(issue 26): a secret exported in the shell that runs ``lockstep up`` (a BMC password a
service's ``env:`` reference reads) never reaches nats-server or PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep_devstack.nats import NatsServer
from lockstep_devstack.postgres import PostgresServer

SECRET = "LOCKSTEP_TESTBMC_PASSWORD"


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def test_nats_server_and_postgres_do_not_inherit_an_exported_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET, "hunter2")
    monkeypatch.setenv("PGPASSWORD", "not-for-postgres")
    nats = NatsServer(tmp_path / "nats", sync_always=False)
    postgres = PostgresServer(tmp_path / "pg", secrets_dir=tmp_path / "secrets", durable=False)
    nats.start()
    try:
        postgres.start()
        try:
            assert nats.proc is not None and postgres.proc is not None
            for pid in (nats.proc.pid, postgres.proc.pid):
                env = environ_of(pid)
                assert SECRET not in env, pid
                assert "PGPASSWORD" not in env
                assert "PATH" in env  # what a program needs is still there
        finally:
            postgres.stop()
    finally:
        nats.stop()
