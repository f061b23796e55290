"""A private Slurm cluster on this host for the updater's Slurm tests: its own munged (key and
socket in a temporary folder), a slurmctld and one slurmd per node, all on localhost on free
ports (``slurmd -N name``: one daemon per ``NodeName`` line, each with its own ``Port``).

Nothing of the host's Slurm or munge is used or touched: every client call carries
``SLURM_CONF`` of this cluster, whose ``AuthInfo`` names this cluster's munge socket.
Where Debian's ``slurm-wlm`` and ``munge`` are not installed, :func:`missing` names what is
absent and the fixture skips with that reason.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from lockstep_updater.domain.slurm_node import SlurmNode, parse_node

PROGRAMS = (
    "munged",
    "mungekey",
    "slurmctld",
    "slurmd",
    "scontrol",
    "sinfo",
    "sbatch",
    "squeue",
    "scancel",
)
START_S = 60.0  # slurmctld, then each slurmd registering, on a loaded 2-core machine
KILL_REQUEST = "REQUEST_KILL_JOB"
"""What slurmctld logs (at ``info``) for every job kill request (``scancel``, a ``DOWN``)."""


SBIN = "/usr/sbin:/usr/local/sbin"  # where Debian puts the daemons; not on a user's PATH


def program(name: str) -> str | None:
    """Where ``name`` is: on PATH, or in the sbin folders."""
    return shutil.which(name) or shutil.which(name, path=SBIN)


def missing() -> list[str]:
    """The programs the cluster needs that are nowhere to be found."""
    return [p for p in PROGRAMS if program(p) is None]


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class SlurmCluster:
    root: Path
    nodes: tuple[str, ...]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    submitted: list[str] = field(default_factory=list)
    kills_before: int = 0  # kill requests of earlier tests' cleanup (``reset``)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            [program(args[0]) or args[0], *args[1:]],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    # -- what the tests look at ------------------------------------------------------------

    def node(self, name: str) -> SlurmNode:
        return parse_node(self.run("scontrol", "--oneliner", "show", "node", name))

    def jobs(self) -> dict[str, tuple[str, str]]:
        """Job id -> (state, nodes) of every job the controller knows."""
        out = self.run("squeue", "-h", "-t", "all", "-o", "%i|%T|%N")
        rows = (line.split("|") for line in out.splitlines() if line.strip())
        return {job: (state, nodes) for job, state, nodes in rows}

    def kill_requests(self) -> int:
        """Job kill requests slurmctld received (its log) since the test began: the count a
        job-killing updater would raise."""
        return self._kills() - self.kills_before

    def _kills(self) -> int:
        log = self.root / "log" / "slurmctld.log"
        return log.read_text(errors="replace").count(KILL_REQUEST)

    def drain(self, name: str, reason: str) -> None:
        """Drain ``name`` as an operator would (someone other than Lockstep)."""
        self.run("scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}")

    def long_job(self, node: str, seconds: int = 600) -> str:
        """Submit a job pinned to ``node`` and wait until it runs; its id."""
        out = self.run(
            "sbatch", "--parsable", "-w", node, "-o", "/dev/null", "--wrap", f"sleep {seconds}"
        )
        job = out.strip().split(";")[0]
        self.submitted.append(job)
        self.wait(lambda: self.jobs().get(job, ("", ""))[0] == "RUNNING", f"job {job} running")
        return job

    def wait(self, condition: object, what: str, timeout_s: float = START_S) -> None:
        """Poll ``condition`` (a callable) until true; the cluster's state is only seen by
        asking it, so this is a bounded poll, not a guess at a duration."""
        deadline = time.monotonic() + timeout_s
        assert callable(condition)
        while not condition():
            if time.monotonic() > deadline:
                logs = self.root / "log"
                tail = (logs / "slurmctld.log").read_text(errors="replace")[-2000:]
                raise TimeoutError(f"slurm cluster: not {what} within {timeout_s:g}s\n{tail}")
            time.sleep(0.1)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        for sub in ("munge-key", "run", "state", "log", "spool"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "munge-key").chmod(0o700)
        (self.root / "run").chmod(0o755)  # munged wants its socket's folder searchable by all
        key = self.root / "munge-key" / "munge.key"
        self.run("mungekey", "-c", "-b", "1024", "-k", str(key))
        sock = self.root / "run" / "munge.sock"
        self._spawn(
            "munged", "-F", "-f", f"--socket={sock}", f"--key-file={key}",
            f"--log-file={self.root / 'log' / 'munged.log'}",
            f"--pid-file={self.root / 'run' / 'munged.pid'}",
            f"--seed-file={self.root / 'run' / 'munged.seed'}",
        )  # fmt: skip
        self.wait(sock.exists, "munge socket up", 10)
        ctld, *ports = _free_ports(1 + len(self.nodes))
        self.conf.write_text(self._conf(sock, ctld, ports))
        self._spawn("slurmctld", "-D", "-i", "-f", str(self.conf))
        for name in self.nodes:
            (self.root / "spool" / name).mkdir(exist_ok=True)
            self._spawn("slurmd", "-D", "-N", name, "-f", str(self.conf))
        self.wait(self._all_idle, "every node idle")

    def _all_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        states = dict(line.split() for line in out.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in self.nodes)

    def _spawn(self, *args: str) -> None:
        log = (self.root / "log" / f"{args[0]}-{len(self.procs)}.out").open("wb")
        self.procs.append(
            subprocess.Popen(
                [program(args[0]) or args[0], *args[1:]],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )

    def _conf(self, sock: Path, ctld: int, ports: list[int]) -> str:
        user = getpass.getuser()
        r = self.root
        lines = [
            "ClusterName=lockstep-test",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ctld}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={sock}",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}/%n",
            f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'run'}/slurmd-%n.pid",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log'}/slurmd-%n.log",
            "SlurmctldDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "ReturnToService=2",
        ]
        lines += [
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port}"
            " CPUs=1 RealMemory=100 State=UNKNOWN"
            for name, port in zip(self.nodes, ports, strict=True)
        ]
        lines.append("PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def reset(self) -> None:
        """Between tests: end the jobs the tests submitted and give every node back."""
        for job in self.submitted:
            self.run("scancel", job, check=False)
        self.submitted.clear()
        self.wait(lambda: not any(s == "RUNNING" for s, _ in self.jobs().values()), "jobs ended")
        for name in self.nodes:
            if self.node(name).drained:
                self.run("scontrol", "update", f"NodeName={name}", "State=RESUME", check=False)
        self.wait(self._all_idle, "every node idle again")
        self.kills_before = self._kills()

    def stop(self) -> None:
        if self.procs:
            # Stopping anyway: the daemons go below, with or without a clean reset.
            with contextlib.suppress(RuntimeError, TimeoutError, subprocess.SubprocessError):
                self.reset()
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
