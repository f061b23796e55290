"""``lockstep bench startup``: how long ``lockstep --help`` and ``lockstep fleet admit`` take,
from exec to exit, against the interpreter's own start measured in the same run.

A Slurm prolog runs ``fleet admit`` for every job (issue 14, item 7, goal <= 0.3 s each). Each
run executes the three commands one after the other (interleaved, so that a load change on a
shared machine hits all three alike) and the medians are reported with the load average.
``fleet admit`` asks a running stack: the one named by ``LOCKSTEP_NATS_URL`` or running under
``--data-dir``, else one this command starts (``lockstep up -s inventory`` in a temporary
directory, stopped afterwards); the node asked about is not registered, so the answer is a
refusal (exit 1), which is an answer all the same.

Without compiled bytecode every run compiles what it imports again (``PYTHONDONTWRITEBYTECODE=1``
stops Python writing it; ``./dev`` compiles it once): the figures say which case they measured.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

GOAL_S = 0.3
STACK_TIMEOUT_S = 240.0
HASH = "0" * 64
ANSWERED = (0, 1)  # admitted, refused; 3 is no answer


class BenchFailed(RuntimeError):
    """The figures would be meaningless (a command failed); the message says which."""


def lockstep_command() -> list[str]:
    """How to run this installation's ``lockstep`` (its console script, or the module)."""
    script = Path(sys.executable).with_name("lockstep")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from lockstep_cli.main import app; app()"]


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - started, done.returncode, (done.stderr or done.stdout).strip()


@contextlib.contextmanager
def _stack(
    data_dir: Path | None, env: dict[str, str], say: Callable[[str], None]
) -> Iterator[tuple[Path | None, str | None]]:
    """(data dir to ask, None) or (None, why admit is skipped)."""
    if "LOCKSTEP_NATS_URL" in env:
        yield None, None
        return
    if data_dir is not None:
        if not (data_dir / "stack.json").exists():
            yield None, f"no stack running under {data_dir}"
            return
        yield data_dir, None
        return
    tmp = Path(tempfile.mkdtemp(prefix="lockstep-bench-startup-"))
    log = (tmp / "up.log").open("w")
    say(f"starting `lockstep up -s inventory` under {tmp} ...")
    up = subprocess.Popen(
        [*lockstep_command(), "up", "--data-dir", str(tmp / "data"), "-s", "inventory"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield _ready(up, tmp / "data", env), None
    except _NotReady as exc:
        yield None, str(exc)
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(timeout=60)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


class _NotReady(RuntimeError):
    pass


def _ready(up: subprocess.Popen[bytes], data_dir: Path, env: dict[str, str]) -> Path:
    """``data_dir`` once the stack answers an admission check."""
    deadline = time.monotonic() + STACK_TIMEOUT_S
    while time.monotonic() < deadline:
        if up.poll() is not None:
            raise _NotReady(f"lockstep up exited with {up.returncode} (log in its data dir)")
        if (data_dir / "stack.json").exists():
            _, code, _ = _timed(_admit(data_dir), env)
            if code in ANSWERED:
                return data_dir
        time.sleep(0.5)  # a stack takes tens of seconds to start: polling its state file
    raise _NotReady(f"the stack did not answer within {STACK_TIMEOUT_S:.0f} s")


def _admit(data_dir: Path | None) -> list[str]:
    where = [] if data_dir is None else ["--data-dir", str(data_dir)]
    return [*lockstep_command(), "fleet", *where, "admit", "--stack-hash", HASH, "--nodes", "n1"]


def bytecode_compiled() -> bool:
    """Whether the modules ``lockstep --help`` and ``fleet admit`` import have current .pyc."""
    names = (
        "typer.main",
        "lockstep_cli.main",
        "lockstep_cli.fleet_cli",
        "lockstep_cli.admit_quick",
    )
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            return False
        if not _current(Path(spec.origin)):
            return False
    return True


def _current(source: Path) -> bool:
    """Whether ``source``'s .pyc is one the import system would use (PEP 552's header: magic,
    flags, then the source's mtime and size for a timestamp pyc; a hash-based one counts)."""
    cached = Path(importlib.util.cache_from_source(str(source)))
    try:
        header = cached.read_bytes()[:16]
    except OSError:
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(header[4:8], "little") != 0:
        return True
    stat = source.stat()
    return header[8:16] == (
        (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
        + (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    )


def run_bench(runs: int, data_dir: Path | None, say: Callable[[str], None]) -> dict[str, Any]:
    """Medians of ``runs`` interleaved runs of the baseline, ``--help`` and ``fleet admit``."""
    env = dict(os.environ)
    env.pop("COLUMNS", None)
    baseline = [sys.executable, "-c", "pass"]
    help_argv = [*lockstep_command(), "--help"]
    with _stack(data_dir, env, say) as (ask, skipped):
        admit_argv = None if skipped else _admit(ask)
        times: dict[str, list[float]] = {"baseline": [], "help": [], "admit": []}
        for _ in range(runs):
            times["baseline"].append(_timed(baseline, env)[0])
            seconds, code, out = _timed(help_argv, env)
            if code != 0:
                raise BenchFailed(f"lockstep --help exited with {code}: {out[-300:]}")
            times["help"].append(seconds)
            if admit_argv is not None:
                seconds, code, out = _timed(admit_argv, env)
                if code not in ANSWERED:
                    raise BenchFailed(f"fleet admit exited with {code}: {out[-300:]}")
                times["admit"].append(seconds)
    load = os.getloadavg()
    medians = {k: round(statistics.median(v), 4) if v else None for k, v in times.items()}
    return {
        "runs": runs,
        "help_s": medians["help"],
        "admit_s": medians["admit"],
        "baseline_s": medians["baseline"],
        "goal_s": GOAL_S,
        "admit_skipped": skipped,
        "load_average": [round(x, 2) for x in load],
        "bytecode_compiled": bytecode_compiled(),
        "dont_write_bytecode": bool(env.get("PYTHONDONTWRITEBYTECODE")),
        "cpus": os.cpu_count(),
    }
