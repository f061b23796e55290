"""XID errors from the kernel log, read from ``/dev/kmsg`` past a cursor.

The NVIDIA driver reports each XID as one kernel log line (NVIDIA, "XID Errors", r570):

    NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s ...

``/dev/kmsg``, kept open and followed (``KernelLog``), gives every record with its sequence
number (Linux, Documentation/ABI/testing/dev-kmsg: ``PRIORITY,SEQUENCE,TIMESTAMP_US,FLAGS;
MESSAGE``, then continuation lines that start with a space). The cursor is the last sequence
number counted with the boot it belongs to (``/proc/sys/kernel/random/boot_id``): a new boot
restarts the numbering, so a cursor of another boot counts from the start. The caller stores
the cursor in the same transaction as the report that carries the counts (``spool.Spool.put``),
so a restart neither loses an XID nor counts one twice.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

KMSG = "dev/kmsg"
BOOT_ID = "proc/sys/kernel/random/boot_id"
XID_MARK = "NVRM: Xid ("
# XID codes are small integers (NVIDIA documents 1..200 today); the health event allows 4 digits.
MAX_XID = 9999
_READ_SIZE = 8192  # one /dev/kmsg read returns one record; records are at most ~1 KiB


@dataclass(frozen=True, slots=True)
class KmsgRecord:
    """One kernel log record."""

    seq: int
    message: str
    facility: int = 0
    """syslog facility (RFC 5424): 0 is the kernel. Any local process may write to /dev/kmsg
    (as facility 1, user, unless it is root and says otherwise), so only kernel records count."""


class XidEvent(BaseModel):
    """One XID line."""

    model_config = ConfigDict(frozen=True)

    code: int
    pci: str
    detail: str
    seq: int | None = None


class Cursor(BaseModel):
    """The last kernel log record counted, in which boot."""

    model_config = ConfigDict(frozen=True)

    boot_id: str
    seq: int


class XidScan(BaseModel):
    """The XIDs logged after a cursor, and the cursor after them."""

    model_config = ConfigDict(frozen=True)

    events: tuple[XidEvent, ...] = ()
    cursor: Cursor | None = None
    error: str | None = None
    """Why the kernel log could not be read (the cursor is then kept as it was)."""

    def counts(self) -> dict[str, int]:
        """XID code -> how many, as the health event carries them."""
        return {str(code): n for code, n in sorted(Counter(e.code for e in self.events).items())}


def parse_record(line: str) -> KmsgRecord | None:
    """A ``/dev/kmsg`` record (its first line), or None for a continuation or malformed line."""
    if not line or line[0] == " ":
        return None
    prefix, sep, message = line.partition(";")
    fields = prefix.split(",")
    if not sep or len(fields) < 4 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    # PRIORITY = facility * 8 + level (dev-kmsg ABI, RFC 5424 section 6.2.1)
    return KmsgRecord(int(fields[1]), message.rstrip("\n"), int(fields[0]) >> 3)


def parse_xid(message: str, seq: int | None = None) -> XidEvent | None:
    """The XID in one log message (with or without a dmesg/syslog prefix), or None."""
    _, sep, rest = message.partition(XID_MARK)
    if not sep:
        return None
    pci, sep, rest = rest.partition("):")
    code, _, detail = rest.strip().partition(",")
    if not sep or not code.isdigit() or not 0 < int(code) <= MAX_XID:
        return None
    return XidEvent(code=int(code), pci=pci.removeprefix("PCI:"), detail=detail.strip(), seq=seq)


def scan(records: Iterable[KmsgRecord], boot_id: str, after: Cursor | None) -> XidScan:
    """The XIDs of ``records`` past ``after`` (all of them when it belongs to another boot),
    and the new cursor (``after`` unchanged when no record is newer)."""
    start = after.seq if after is not None and after.boot_id == boot_id else -1
    last = start
    events: list[XidEvent] = []
    for rec in records:
        if rec.seq <= start:
            continue
        last = max(last, rec.seq)
        event = parse_xid(rec.message, rec.seq) if rec.facility == 0 else None
        if event is not None:
            events.append(event)
    cursor = Cursor(boot_id=boot_id, seq=last) if last >= 0 else after
    return XidScan(events=tuple(events), cursor=cursor)


def _read_chunks(fd: int) -> list[bytes]:
    """What an open log has for us now, without blocking: one record per read from
    ``/dev/kmsg``, any number of whole or partial lines from a pipe."""
    out: list[bytes] = []
    while True:
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return out
        except OSError as exc:
            # EPIPE: records were overwritten while we read; the next read goes on with the
            # oldest one left (dev-kmsg ABI).
            if exc.errno == errno.EPIPE:
                continue
            raise
        if not chunk:
            return out
        out.append(chunk)


class KernelLog:
    """The kernel log, followed: ``/dev/kmsg`` (or a named pipe carrying records in its format,
    a node's log relay or a test's) stays open, so each ``read`` returns only the records
    logged since the previous one (the first: every record the ring buffer still holds). A file
    of records (a capture) is read whole every time.

    ``watch`` lets the agent be woken by an XID as soon as it is logged rather than at its next
    cycle: the event loop calls it when the log is readable; it reads what is new into a
    buffer that the next ``read`` returns first, and says whether any of it is an XID. ``read``
    runs in the cycle's worker thread and ``watch`` on the event loop: a lock keeps each record
    in exactly one of them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._stream = False  # a pipe: lines may be split across reads
        self._partial = b""
        self._pending: list[KmsgRecord] = []
        self._lock = threading.Lock()

    def follow(self) -> int | None:
        """Open the log to follow it; its descriptor (to watch for readability), or None when
        it is a plain file, missing or unreadable (then nothing wakes the agent early)."""
        with self._lock:
            try:
                return self._open()
            except OSError:
                return None

    def _open(self) -> int | None:
        if self._fd is None:
            try:
                mode = self.path.stat().st_mode
            except FileNotFoundError:
                return None
            if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
                return None
            self._stream = stat.S_ISFIFO(mode)
            # A pipe opened for writing too never reads as closed (no POLLHUP storm) while no
            # writer has it open; /dev/kmsg is opened for reading only.
            flags = os.O_RDWR if self._stream else os.O_RDONLY
            self._fd = os.open(self.path, flags | os.O_NONBLOCK)
        return self._fd

    def _records(self, chunks: list[bytes]) -> list[KmsgRecord]:
        if self._stream:
            data = self._partial + b"".join(chunks)
            whole, _, self._partial = data.rpartition(b"\n")
            lines = whole.decode("utf-8", errors="replace").split("\n") if whole else []
        else:  # one record per read: its first line (continuation lines start with a space)
            lines = [c.decode("utf-8", errors="replace").split("\n", 1)[0] for c in chunks]
        return [r for r in map(parse_record, lines) if r is not None]

    def watch(self) -> bool:
        """Read what is new into the buffer; True when a kernel record among it is an XID
        (OSError when the log cannot be read)."""
        with self._lock:
            if self._fd is None:
                return False
            fresh = self._records(_read_chunks(self._fd))
            self._pending.extend(fresh)
        return any(r.facility == 0 and parse_xid(r.message) is not None for r in fresh)

    def read(self) -> list[KmsgRecord]:
        """New records (OSError when the log cannot be opened or read)."""
        with self._lock:
            if self._open() is None:
                try:
                    text = self.path.read_text(encoding="utf-8", errors="replace")
                except FileNotFoundError:
                    return []
                return [r for r in map(parse_record, text.splitlines()) if r is not None]
            assert self._fd is not None  # noqa: S101 - _open opened it
            records, self._pending = self._pending, []
            return records + self._records(_read_chunks(self._fd))

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def read_kmsg(path: Path) -> list[KmsgRecord]:
    """Every record ``path`` holds now (``/dev/kmsg`` or a capture)."""
    log = KernelLog(path)
    try:
        return log.read()
    finally:
        log.close()


def boot_id(root: Path) -> str:
    """This boot's id (a fixed one where the file is missing: a fake root)."""
    try:
        return (root / BOOT_ID).read_text(encoding="utf-8").strip() or "unknown"
    except OSError:
        return "unknown"


def probe_xids(root: Path, after: Cursor | None, log: KernelLog | None = None) -> XidScan:
    """The XIDs logged on this boot after ``after`` (``log``: the followed kernel log, else
    ``root``'s read whole). A kernel log the agent may not read (not root, no CAP_SYSLOG,
    ``kernel.dmesg_restrict=1``) is reported, never raised."""
    try:
        records = (log or KernelLog(root / KMSG)).read()
    except OSError as exc:
        return XidScan(cursor=after, error=f"{root / KMSG}: {exc.strerror or exc}")
    return scan(records, boot_id(root), after)
