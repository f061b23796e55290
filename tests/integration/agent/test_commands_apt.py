"""The install path for real with apt: a small real package (``hello``) stands in for the
driver; the mechanics (download the exact version, check its SHA-256, install that file) are
the same. It installs a package on the machine, so it runs only when asked:
``LOCKSTEP_TEST_APT=1`` (as root, on a Debian-family machine with its package lists)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lockstep_agent.commands import Executor, InbandCommand

pytestmark = pytest.mark.integration
PACKAGE = "hello"
APT_GET = shutil.which("apt-get") or "apt-get"
DPKG_QUERY = shutil.which("dpkg-query") or "dpkg-query"


def _skip_reason() -> str | None:
    if os.environ.get("LOCKSTEP_TEST_APT") != "1":
        return "installs a package on this machine: set LOCKSTEP_TEST_APT=1 to run it"
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return "needs apt-get and root"
    return None


def _candidate() -> tuple[str, str]:
    """The candidate version and the SHA-256 apt's signed index gives for its file."""
    out = subprocess.run(
        [APT_GET, "download", "--print-uris", PACKAGE],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    name, digest = out[1], out[3].removeprefix("SHA256:")
    return name.split("_")[1], digest


def _installed() -> str | None:
    done = subprocess.run(
        [DPKG_QUERY, "-W", "-f=${Status} ${Version}", PACKAGE],
        capture_output=True,
        text=True,
        check=False,
    )
    fields = done.stdout.split()
    return fields[-1] if done.returncode == 0 and "installed" in fields[:3] else None


def test_install_exact_version_with_apt_once_and_refuse_other_bytes(tmp_path: Path) -> None:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    before = _installed()
    version, digest = _candidate()
    ex = Executor(tmp_path / "journal.sqlite", manager="apt")
    cmd = InbandCommand(
        site="s1",
        node_id="n1",
        command_id="install-1",
        action="install-driver",
        work_item="w1",
        fencing_token=1,
        package=PACKAGE,
        version=version,
        package_sha256=digest,
    )
    try:
        out = ex.execute(cmd)
        assert out.status == "done", out.detail
        assert _installed() == version
        assert ex.execute(cmd) == out  # answered from the journal, not run again
        wrong = cmd.model_copy(update={"command_id": "install-2", "package_sha256": "0" * 64})
        refused = ex.execute(wrong)
        assert refused.status == "refused"
        assert "not the attested" in refused.detail
    finally:
        ex.close()
        if before is None:
            subprocess.run(
                [APT_GET, "remove", "-y", PACKAGE], capture_output=True, check=False, timeout=300
            )
