"""The simulated node's end of the agent's command executor: the programs the real agent runs
(``lockstep_agent.commands``: ``apt-get download``, ``apt-get install``, ``dkms autoinstall``,
``systemctl reboot``) carried out on the node's ``NodeSoftware``, and its in-band state read as
the agent's ``NodeReading``.

So a simulated node answers the updater's in-band commands through the agent's own executor:
its journal, its fencing and its digest check are the real agent's; only the host is simulated.
The package repository is ``packages`` (version -> the bytes ``apt-get download`` fetches):
by default ``package_bytes(version)`` for every release the simulator knows, which a test's or
the demo's bundle attests; serving other bytes is how a tampered mirror is simulated.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lockstep_agent.commands import Executor
from lockstep_common.events.v1 import NodeCommandAnswered, NodeCommandRequested, NodeReading
from lockstep_sim.agents.software import CATALOG, NodeSoftware
from lockstep_sim.agents.state import InvalidTransition

APT_NOT_FOUND = 100  # apt-get's exit status for an error (apt-get(8), DIAGNOSTICS)


def package_bytes(version: str) -> bytes:
    """What the simulated repository serves for driver ``version``."""
    return f"simulated nvidia-driver {version}\n".encode()


def default_packages() -> dict[str, bytes]:
    return {version: package_bytes(version) for version in CATALOG}


STEPS = {
    ("apt-get", "install"): "install-driver",
    ("dkms", "autoinstall"): "rebuild-dkms",
    ("systemctl", "reboot"): "reboot",
}
"""The programs that change a node's in-band state, by the in-band step they carry out."""


class SimHost:
    """``lockstep_agent.commands.Host`` on one simulated node. Every argv it was asked to run
    is kept in ``ran``, in order (the agent's side of the ledger); every step that changes the
    node (install, DKMS build, reboot) goes to ``ledger`` too: ``{"at", "node", "step",
    "outcome"}``, the outcome the node's phase after it, or ``refused``."""

    def __init__(
        self,
        software: NodeSoftware,
        packages: Mapping[str, bytes] | None = None,
        ledger: list[dict[str, Any]] | None = None,
    ) -> None:
        self.software = software
        self.packages = default_packages() if packages is None else packages
        self.ran: list[tuple[str, ...]] = []
        self.ledger: list[dict[str, Any]] = [] if ledger is None else ledger

    def run(self, argv: Sequence[str], cwd: Path | None = None) -> tuple[int, str]:
        self.ran.append(tuple(argv))
        try:
            rc, out = self._run(tuple(argv), cwd)
        except InvalidTransition as exc:
            rc, out = 1, f"{argv[0]}: refused in phase {self.software.phase.value}: {exc}"
        except KeyError as exc:
            rc, out = APT_NOT_FOUND, f"E: no driver release {exc} in the simulator's catalogue"
        step = STEPS.get((argv[0], argv[1]) if len(argv) > 1 else (argv[0], ""))
        if step is not None:
            self.ledger.append(
                {
                    "at": datetime.now(UTC).isoformat(),
                    "node": self.software.node_id,
                    "step": step,
                    "outcome": self.software.phase.value if rc == 0 else "refused",
                }
            )
        return rc, out

    def steps(self) -> list[str]:
        """The steps this node carried out, in order (refused ones left out)."""
        mine = (e for e in self.ledger if e["node"] == self.software.node_id)
        return [e["step"] for e in mine if e["outcome"] != "refused"]

    def _run(self, argv: tuple[str, ...], cwd: Path | None) -> tuple[int, str]:
        match argv:
            case ("apt-get", "download", spec) if cwd is not None and "=" in spec:
                package, version = spec.split("=", 1)
                data = self.packages.get(version)
                if data is None:
                    return APT_NOT_FOUND, f"E: Version '{version}' for '{package}' was not found"
                (cwd / f"{package}_{version}_amd64.deb").write_bytes(data)
                return 0, ""
            case ("apt-get", "install", *_, path):
                version = Path(path).name.split("_")[1]
                self.software.install_driver(version)
                return 0, ""
            case ("dkms", "autoinstall"):
                self.software.rebuild_dkms()
                return 0, ""
            case ("systemctl", "reboot"):
                self.software.reboot()
                return 0, ""
        return 127, f"{argv[0]}: not simulated"


def reader(software: NodeSoftware) -> Callable[[], NodeReading]:
    """The node's in-band state as its agent reads it."""

    def read() -> NodeReading:
        s = software.state
        return NodeReading(
            phase=software.phase.value,
            driver=s.driver.version,
            loaded_module=s.loaded_module,
            gsp_firmware=s.gsp_firmware,
            firmware_dirs=tuple(s.firmware_dirs),
            dkms=s.dkms.value,
            cuda=s.cuda,
            nccl=s.nccl,
            fabric_manager=s.fabric_manager,
            module_rejected=s.module_rejected,
            diag_passed=software.diag_passes(),
        )

    return read


def sim_executor(
    software: NodeSoftware,
    journal: Path,
    packages: Mapping[str, bytes] | None = None,
    ledger: list[dict[str, Any]] | None = None,
) -> tuple[Executor, SimHost]:
    """The agent's executor for one simulated node, journaling to ``journal`` (its steps to
    ``ledger``, see ``SimHost``)."""
    host = SimHost(software, packages, ledger)
    return Executor(journal, host, manager="apt", reader=reader(software)), host


class LazyExecutor:
    """``sim_executor``'s executor, made on the node's first command: a simulated fleet of
    12,500 nodes keeps no journal open for the nodes no command reaches."""

    def __init__(
        self,
        software: NodeSoftware,
        journal: Path,
        packages: Mapping[str, bytes] | None = None,
        ledger: list[dict[str, Any]] | None = None,
    ) -> None:
        self.host = SimHost(software, packages, ledger)
        self._journal, self._reader = journal, reader(software)
        self._executor: Executor | None = None
        self._lock = threading.Lock()  # commands run in worker threads

    def execute(self, cmd: NodeCommandRequested, *, dry_run: bool = False) -> NodeCommandAnswered:
        with self._lock:
            if self._executor is None:
                self._executor = Executor(
                    self._journal, self.host, manager="apt", reader=self._reader
                )
            executor = self._executor
        return executor.execute(cmd, dry_run=dry_run)

    def close(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.close()
                self._executor = None
