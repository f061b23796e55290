"""Commands start fast: ``lockstep --help`` loads no server, driver or service code, and
``lockstep fleet admit`` (a Slurm prolog runs it for every job) loads only what it sends.

Measured on the shared 2-core development machine (load ~2; 5 runs each, `/usr/bin/time`,
main vs this change, same moment): `--help` 1.42-1.50 s (one 2.47) before, 0.33-0.50 s after;
`fleet admit` (NATS refused) 1.15-2.95 s before, 0.52-0.76 s after, against 0.31-0.50 s for
importing typer, rich, nats-py and pydantic-settings alone (the floor with these libraries).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

# Modules only some commands need; importing any of them costs 50-300 ms.
HEAVY = (
    "asyncpg",
    "nats",
    "aiohttp",
    "scipy",
    "numpy",
    "pydantic_settings",
    "lockstep_devstack",
    "lockstep_inventory",
    "lockstep_planner",
    "lockstep_updater",
    "lockstep_healthgate",
    "lockstep_attest",
    "lockstep_sim.runtime",
    "lockstep_cli.supervisor",
)


def loaded_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    """The HEAVY modules (or their submodules) loaded once ``code`` ran in a fresh process."""
    probe = (
        f"{code}\nimport sys, json\n"
        f"print(json.dumps(sorted({{m.split('.')[0] if m.split('.')[0] != 'lockstep_sim' "
        f"and m.split('.')[0] != 'lockstep_cli' else m for m in sys.modules}})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    ).stdout
    names = set(json.loads(out.strip().splitlines()[-1]))
    return {h for h in HEAVY if h in names}


def test_importing_the_cli_loads_no_heavy_module() -> None:
    assert loaded_after("import lockstep_cli.main") == set()


def test_fleet_admit_loads_no_database_server_or_service_runtime_code() -> None:
    # Exits 3 (NATS refused on port 1) after building its request: everything it needs ran.
    code = (
        "import os\n"
        "os.environ.update(LOCKSTEP_NATS_URL='nats://127.0.0.1:1', "
        "LOCKSTEP_DATABASE_URL='postgresql://u@127.0.0.1:1/x')\n"
        "from lockstep_cli.main import app\n"
        "try:\n"
        "    app(['fleet', 'admit', '--stack-hash', 'a' * 64, '--nodes', 'n1', "
        "'--timeout', '1'])\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 3, exit.code\n"
    )
    loaded = loaded_after(code)
    # What admit needs: NATS (and aiohttp, which nats-py imports), its settings class.
    assert loaded <= {"nats", "aiohttp", "pydantic_settings", "lockstep_inventory"}
    assert not {"asyncpg", "scipy", "lockstep_devstack", "lockstep_cli.supervisor"} & loaded


def test_version() -> None:
    from typer.testing import CliRunner

    from lockstep_cli.main import app

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("lockstep 0.")
