"""XIDs from real kernel log captures, counted past a cursor: a restart neither loses nor
double-counts one, a new boot counts from the start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockstep_agent.probes.xid import (
    Cursor,
    KernelLog,
    KmsgRecord,
    parse_record,
    parse_xid,
    probe_xids,
    read_kmsg,
    scan,
)
from tests.reference import REFERENCE

pytestmark = pytest.mark.unit
GPUD = REFERENCE / "node-agent" / "gpud"
BOOT = "2ac7e67e-bcbb-4903-8b2f-937cedd6d671"


def _xid_messages() -> list[str]:
    """The XID lines of the XE9680's log, without dmesg's ``[date]`` prefix."""
    text = (GPUD / "dmesg-with-xid-119.log").read_text(encoding="utf-8")
    return [line.split("] ", 1)[1] for line in text.splitlines() if "NVRM: Xid" in line]


def test_xid_lines_of_a_real_driver_log() -> None:
    text = (GPUD / "dmesg-with-xid-119.log").read_text(encoding="utf-8")
    events = [e for e in map(parse_xid, text.splitlines()) if e is not None]
    assert len(events) == 5
    assert {(e.code, e.pci) for e in events} == {(119, "0000:9b:00")}
    assert events[0].detail.startswith("pid=2024380, name=nvidia-smi, Timeout after 6s")
    # The other NVRM lines of the same incident (RPC history, GPU serial) are no XID.
    assert sum("NVRM:" in line for line in text.splitlines()) > 20


@pytest.mark.parametrize(
    "message",
    [
        "NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d",
        "NVRM: Xid (PCI:0000:9b:00): abc, pid=1",
        "NVRM: Xid (PCI:0000:9b:00): 0, pid=1",
        "NVRM: Xid (PCI:0000:9b:00): 123456, pid=1",
        "NVRM: Xid (PCI:0000:9b:00 79, no closing",
        "user space wrote: NVRM: Xid",
    ],
)
def test_lines_that_are_no_xid(message: str) -> None:
    assert parse_xid(message) is None


def test_kmsg_records_of_a_real_node() -> None:
    records = read_kmsg(GPUD / "kmsg.1.log")
    assert [r.seq for r in records] == list(range(3964, 4011))
    assert records[0].message == "nvidia-nvswitch2: open (major=510)"
    assert parse_record(" SUBSYSTEM=pci") is None  # a continuation line
    assert parse_record("6,x,1,-;msg") is None


def _log() -> list[KmsgRecord]:
    """The node's real /dev/kmsg records, then the XE9680's XID messages as the records that
    follow them (real messages in the real framing; only the sequence numbers are ours)."""
    base = read_kmsg(GPUD / "kmsg.1.log")
    last = base[-1].seq
    return base + [KmsgRecord(last + 1 + i, m) for i, m in enumerate(_xid_messages())]


def test_a_restart_neither_loses_nor_double_counts() -> None:
    log = _log()
    first = scan(log[:-2], BOOT, None)
    assert first.counts() == {"119": 3}
    # The agent restarts with the cursor it stored; two more XIDs were logged meanwhile.
    second = scan(log, BOOT, first.cursor)
    assert second.counts() == {"119": 2}
    assert second.cursor == Cursor(boot_id=BOOT, seq=log[-1].seq)
    # Nothing new: nothing counted, cursor unchanged.
    again = scan(log, BOOT, second.cursor)
    assert again.counts() == {}
    assert again.cursor == second.cursor


def test_a_cursor_of_another_boot_counts_this_boots_log_from_the_start() -> None:
    log = _log()
    stale = Cursor(boot_id="previous-boot", seq=10**9)
    assert scan(log, BOOT, stale).counts() == {"119": 5}


def test_probe_reads_the_roots_kmsg_and_boot_id(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    lines = [f"4,{r.seq},1000,-;{r.message}" for r in _log()]
    (tmp_path / "dev/kmsg").write_text("\n".join(lines) + "\n")
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text(BOOT + "\n")
    result = probe_xids(tmp_path, None)
    assert result.counts() == {"119": 5}
    assert result.cursor is not None and result.cursor.boot_id == BOOT


def test_no_kernel_log_is_no_xid(tmp_path: Path) -> None:
    assert probe_xids(tmp_path, None).counts() == {}


def test_an_xid_line_written_by_a_user_process_is_not_counted() -> None:
    # `echo "NVRM: Xid ..." > /dev/kmsg` by any process is logged as facility user (1):
    # priority 14 is user.info; the kernel's own records have facility 0.
    forged = parse_record("14,5000,1,-;NVRM: Xid (PCI:0000:9b:00): 79, pid=1, forged")
    assert forged is not None and forged.facility == 1
    assert scan([forged], BOOT, None).counts() == {}
    assert scan([KmsgRecord(5000, forged.message)], BOOT, None).counts() == {"79": 1}


def test_a_kernel_log_the_agent_may_not_read_is_reported(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/kmsg").mkdir()  # reading a directory fails as a refused open does
    before = Cursor(boot_id=BOOT, seq=7)
    result = probe_xids(tmp_path, before)
    assert result.counts() == {}
    assert result.cursor == before  # nothing counted, nothing skipped
    assert result.error == f"{tmp_path / 'dev/kmsg'}: Is a directory"


def test_following_this_machines_kernel_log() -> None:
    """On the real /dev/kmsg: the followed log returns only what was logged since the last
    read, and a line a process writes there is logged as facility user, so never an XID."""
    log = KernelLog(Path("/dev/kmsg"))
    try:
        try:
            log.read()
            with Path("/dev/kmsg").open("w") as kmsg:
                kmsg.write("lockstep-agent test: NVRM: Xid (PCI:0000:9b:00): 79, pid=1, forged\n")
        except OSError as exc:
            pytest.skip(f"/dev/kmsg cannot be read and written here: {exc}")
        new = log.read()
    finally:
        log.close()
    assert [r.message for r in new][-1].endswith("79, pid=1, forged")
    assert new[-1].facility == 1  # user: the kernel's own records are facility 0
    assert scan(new, BOOT, None).counts() == {}


def test_a_followed_pipe_wakes_only_for_a_kernel_xid_and_counts_each_record_once(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    log = KernelLog(fifo)
    fd = log.follow()
    assert fd is not None
    writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        # A process's forged line (facility user, 14 = 1 * 8 + 6) and an ordinary kernel line.
        os.write(writer, b"14,1,10,-;NVRM: Xid (PCI:0000:9b:00): 79, forged\n")
        os.write(writer, b"6,2,20,-;mlx5_core 0000:ab:00.0: Link ACTIVE\n6,3,30,-;NVRM: Xi")
        assert log.watch() is False
        os.write(writer, b"d (PCI:0000:9b:00): 79, pid=1, GPU has fallen off the bus.\n")
        assert log.watch() is True
    finally:
        os.close(writer)
    records = log.read()
    assert [r.seq for r in records] == [1, 2, 3]
    assert scan(records, "b", None).counts() == {"79": 1}
    assert log.read() == []  # read once
    assert log.watch() is False
    log.close()


def test_a_capture_file_is_not_followed(tmp_path: Path) -> None:
    capture = tmp_path / "kmsg"
    capture.write_text("3,1,10,-;NVRM: Xid (PCI:0000:9b:00): 79, pid=1\n")
    log = KernelLog(capture)
    assert log.follow() is None  # nothing to watch: its XIDs wait for the cycle
    assert [r.seq for r in log.read()] == [1]
