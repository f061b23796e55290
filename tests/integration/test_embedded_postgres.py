"""The embedded PostgreSQL started by root: it runs as its service user with that user's group
only, and reaches binaries and cluster that live under private (0700) directories, as in a
clone under ``/root``, without opening the binaries' directory to anyone."""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockstep_devstack import postgres
from lockstep_devstack.postgres import SERVICE_USER, PostgresServer, postgres_bin_dir

pytestmark = [
    pytest.mark.integration,
    # Only root hands PostgreSQL to another user; anyone else runs it as themselves.
    pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as a service user"),
]


@pytest.fixture
def base() -> Iterator[Path]:
    # Not pytest's tmp_path: its 0700 parents would get the search bit this test looks for.
    path = Path(tempfile.mkdtemp(prefix="lockstep-pg-test-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _ids(pid: int) -> dict[str, list[int]]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            fields[key] = [int(v) for v in value.split()]
    return fields


def test_private_binaries_and_cluster(
    base: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    home = base / "home"  # where the clone and its .venv live, like /root/.fresh.XXXX
    home.mkdir(mode=0o700)
    wheel = postgres_bin_dir().parents[1]  # site-packages/pgserver, and its vendored libraries
    site = home / "site-packages"
    skip = shutil.ignore_patterns("include")
    shutil.copytree(wheel, site / wheel.name, symlinks=True, ignore=skip)
    shutil.copytree(wheel.with_name(f"{wheel.name}.libs"), site / f"{wheel.name}.libs")
    monkeypatch.setattr(postgres, "postgres_bin_dir", lambda: site / "pgserver/pginstall/bin")
    private = base / "private"  # where the user keeps the cluster
    private.mkdir(mode=0o700)
    server = PostgresServer(private / "pg", durable=False)
    caplog.set_level(logging.WARNING, logger=postgres.__name__)
    try:
        server.start()
        assert server.proc is not None
        ids = _ids(server.proc.pid)
        assert server._psql("SELECT 1").stdout.strip() == b"1"
    finally:
        server.stop()
    account = pwd.getpwnam(SERVICE_USER)
    assert ids == {"Uid": [account.pw_uid] * 4, "Gid": [account.pw_gid] * 4, "Groups": []}
    assert server.bin_dir == private / "pg/pginstall/pgserver/pginstall/bin"  # not the private one
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(private.stat().st_mode) == 0o701  # the one bit, and said so
    assert f"could not enter {private}: added its search permission" in caplog.text
