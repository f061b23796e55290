"""In-band commands: once per id (journal), fenced per work item, only the attested bytes
installed; a dry run runs nothing. A fake host plays the package manager."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lockstep_agent.commands import Executor, InbandCommand
from lockstep_common.events.v1 import NodeReading

pytestmark = pytest.mark.unit
DEB = b"!<arch>\nthe driver package bytes"
DIGEST = hashlib.sha256(DEB).hexdigest()


class Died(BaseException):
    """The agent's process ending mid-command."""


class FakeHost:
    def __init__(self, payload: bytes = DEB, die_on: str | None = None) -> None:
        self.payload = payload
        self.die_on = die_on
        self.ran: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str]:
        self.ran.append(tuple(argv))
        if self.die_on is not None and self.die_on in argv:
            raise Died
        if argv[1] == "download" and cwd is not None:
            (cwd / "nvidia-driver_580.65.06-1_amd64.deb").write_bytes(self.payload)
        return 0, ""


def _cmd(**overrides: Any) -> InbandCommand:
    values: dict[str, Any] = {
        "site": "s1",
        "node_id": "n1",
        "command_id": "c1",
        "action": "install-driver",
        "work_item": "w1",
        "fencing_token": 5,
        "package": "nvidia-driver",
        "version": "580.65.06-1",
        "package_sha256": DIGEST,
    }
    return InbandCommand(**(values | overrides))


def test_install_downloads_checks_and_installs_that_file(tmp_path: Path) -> None:
    host = FakeHost()
    out = Executor(tmp_path / "j.sqlite", host, "apt").execute(_cmd())
    assert out.status == "done", out
    assert host.ran[0] == ("apt-get", "download", "nvidia-driver=580.65.06-1")
    install = host.ran[1]
    assert install[:4] == ("apt-get", "install", "-y", "--no-install-recommends")
    assert install[4].endswith("/nvidia-driver_580.65.06-1_amd64.deb")  # the checked file


def test_a_repeated_command_id_runs_once(tmp_path: Path) -> None:
    host = FakeHost()
    journal = tmp_path / "j.sqlite"
    first = Executor(journal, host, "apt").execute(_cmd())
    again = Executor(journal, host, "apt").execute(_cmd())  # after a restart, too
    assert again == first
    assert len(host.ran) == 2  # download and install, once


def test_an_id_reused_for_another_request_is_refused(tmp_path: Path) -> None:
    host = FakeHost()
    ex = Executor(tmp_path / "j.sqlite", host, "apt")
    ex.execute(_cmd())
    out = ex.execute(_cmd(action="reboot"))
    assert (out.status, out.detail) == ("refused", "command id already used for another request")
    assert len(host.ran) == 2


def test_a_lapsed_fencing_token_is_refused(tmp_path: Path) -> None:
    host = FakeHost()
    ex = Executor(tmp_path / "j.sqlite", host, "apt")
    assert ex.execute(_cmd(command_id="a", action="rebuild-dkms", fencing_token=7)).status == (
        "done"
    )
    out = ex.execute(_cmd(command_id="b", action="reboot", fencing_token=6))
    assert out.status == "refused"
    assert out.detail == "fencing token 6 of work item w1 has lapsed (token 7 was seen)"
    assert host.ran == [("dkms", "autoinstall")]
    # Another work item has its own fence.
    assert ex.execute(_cmd(command_id="c", action="reboot", work_item="w2", fencing_token=1))


def test_a_package_that_is_not_the_attested_one_is_not_installed(tmp_path: Path) -> None:
    host = FakeHost(payload=b"what a compromised mirror serves")
    out = Executor(tmp_path / "j.sqlite", host, "apt").execute(_cmd())
    assert out.status == "refused"
    assert f"not the attested {DIGEST}: not installed" in out.detail
    assert [argv[1] for argv in host.ran] == ["download"]  # never installed


def test_a_command_cut_short_by_a_crash_is_not_run_again(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    with pytest.raises(Died):
        Executor(journal, FakeHost(die_on="install"), "apt").execute(_cmd())
    host = FakeHost()
    out = Executor(journal, host, "apt").execute(_cmd())
    assert out.status == "interrupted"
    assert host.ran == []


def test_dry_run_runs_and_journals_nothing(tmp_path: Path) -> None:
    host = FakeHost()
    ex = Executor(tmp_path / "j.sqlite", host, "dnf")
    out = ex.execute(_cmd(), dry_run=True)
    assert out.status == "dry-run"
    assert out.ran[0] == ("dnf", "download", "nvidia-driver-580.65.06-1")
    assert host.ran == []
    assert ex.execute(_cmd()).status == "done"  # the real run still happens


@pytest.mark.parametrize(
    "bad",
    [
        {"command_id": "a b"},
        {"package": "pkg; rm -rf /"},
        {"version": "1.0 --allow-downgrades"},
        {"package_sha256": "ABC"},
        {"fencing_token": -1},
        {"action": "format-disk"},
    ],
)
def test_hostile_commands_are_refused_by_the_model(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="validation error"):
        _cmd(**bad)


def test_install_without_digest_is_refused(tmp_path: Path) -> None:
    host = FakeHost()
    out = Executor(tmp_path / "j.sqlite", host, "apt").execute(_cmd(package_sha256=None))
    assert (out.status, out.detail) == (
        "refused",
        "install-driver needs package, version and package_sha256",
    )
    assert host.ran == []


def _reading(phase: str = "ready") -> NodeReading:
    return NodeReading(phase=phase, driver="580.65.06", dkms="built", cuda="13.0", nccl="2.27.7")


def test_a_read_answers_the_nodes_state_and_burns_no_id_nor_fence(tmp_path: Path) -> None:
    phases = iter(["ready", "dkms_built"])
    host = FakeHost()
    executor = Executor(tmp_path / "j.sqlite", host, "apt", reader=lambda: _reading(next(phases)))
    read = _cmd(action="read-state", fencing_token=9, package=None, version=None)
    first, second = executor.execute(read), executor.execute(read)
    assert (first.status, first.state) == ("done", _reading("ready"))
    assert second.state == _reading("dkms_built")  # read again, not answered from a journal
    # A read with token 9 moved no fence: the holder of token 5 still commands.
    assert executor.execute(_cmd(command_id="c2")).status == "done"
    assert host.ran[0][:2] == ("apt-get", "download")


def test_a_read_without_a_reader_is_refused_by_name(tmp_path: Path) -> None:
    out = Executor(tmp_path / "j.sqlite", FakeHost(), "apt").execute(
        _cmd(action="read-state", package=None, version=None)
    )
    assert out.status == "refused" and "reads no in-band state" in out.detail
