"""A server or service that exits while starting is one line: what, where, why, and its log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lockstep_cli.supervisor import service_reason
from lockstep_devstack.process import StartFailed, wait_until

pytestmark = pytest.mark.unit


def test_a_server_that_exits_while_starting_names_the_address_in_use(tmp_path: Path) -> None:
    log = tmp_path / "nats.log"
    log.write_text(
        "[1] [INF] Starting nats-server\n"
        '[1] [FTL] Error listening on port: 127.0.0.1:4222, "address already in use"\n'
        "[1] [INF] Server Exiting..\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    proc.wait()
    with pytest.raises(StartFailed) as failed:
        wait_until(
            lambda: False,
            timeout_s=5,
            what="nats-server on 127.0.0.1:4222",
            proc=proc,
            log_path=log,
        )
    message = str(failed.value)
    assert "\n" not in message
    assert message == (
        "nats-server on 127.0.0.1:4222 exited with code 1 while starting: [1] [FTL] Error "
        'listening on port: 127.0.0.1:4222, "address already in use" '
        f"(log {log})"
    )


def test_a_service_reason_is_its_last_error_message_or_its_last_stderr_line(
    tmp_path: Path,
) -> None:
    log = tmp_path / "inventory.log"
    records = [
        {"level": "info", "message": "starting"},
        {"level": "error", "message": "refusing to start: 127.0.0.1:9 (X_HTTP_PORT) is in use"},
        {"level": "info", "message": "bye"},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert service_reason(log) == "refusing to start: 127.0.0.1:9 (X_HTTP_PORT) is in use"
    log.write_text("invalid settings: LOCKSTEP_NAMESPACE: bad\n")
    assert service_reason(log) == "invalid settings: LOCKSTEP_NAMESPACE: bad"
