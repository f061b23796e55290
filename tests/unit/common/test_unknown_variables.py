"""A misspelt ``LOCKSTEP_*`` variable is reported with the closest known name (pydantic-settings
ignores it, which would leave the default in force without a word)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lockstep_common.settings import unknown_variables, variable_names
from lockstep_inventory.settings import Settings as InventorySettings

pytestmark = pytest.mark.unit


def test_known_names_are_the_prefixed_fields_and_the_shared_aliases() -> None:
    names = variable_names(InventorySettings)
    assert {"LOCKSTEP_NATS_URL", "LOCKSTEP_DATABASE_URL", "LOCKSTEP_STREAM_MAX_AGE_S"} <= names
    assert {"LOCKSTEP_INVENTORY_SWEEP_INTERVAL_S", "LOCKSTEP_INVENTORY_DB_SCHEMA"} <= names
    assert "LOCKSTEP_INVENTORY_NATS_URL" not in names  # shared: never read under the prefix


@pytest.mark.parametrize(
    ("variable", "line"),
    [
        (
            "LOCKSTEP_NATS_ULR",
            "LOCKSTEP_NATS_ULR is not a Lockstep setting; did you mean LOCKSTEP_NATS_URL?",
        ),
        (
            "LOCKSTEP_INVENTORY_SWEEP_INTERVALS",
            "LOCKSTEP_INVENTORY_SWEEP_INTERVALS is not a Lockstep setting; did you mean "
            "LOCKSTEP_INVENTORY_SWEEP_INTERVAL_S?",
        ),
        ("lockstep_databse_url", "did you mean LOCKSTEP_DATABASE_URL?"),
        ("LOCKSTEP_INVENTORY_QQQQQQQQQQQQQQQQQQQQ", "is not a setting of inventory"),
    ],
)
def test_a_misspelt_variable_is_named_with_the_closest(variable: str, line: str) -> None:
    found = unknown_variables({variable: "1", "LOCKSTEP_NATS_URL": "nats://x"}, InventorySettings)
    assert len(found) == 1 and line in found[0]


@pytest.mark.parametrize(
    "variable",
    [
        "LOCKSTEP_PLANNER_POLICY_FILE",  # another service's: not inventory's business
        "LOCKSTEP_DEMO_BMC_PASSWORD",  # an env:PREFIX credential reference
        "LOCKSTEP_DATA_DIR",  # read by the command-line program
        "LOCKSTEP_TEST_NATS_URL",  # the test harness's external server, no typo
        "PATH",
    ],
)
def test_other_variables_are_left_alone(variable: str) -> None:
    assert unknown_variables({variable: "x"}, InventorySettings) == []


def test_a_service_warns_about_a_misspelt_variable_before_its_settings_fail() -> None:
    # LOCKSTEP_NAMESPACE is refused, so the process stops before connecting to anything.
    env = {"LOCKSTEP_NATS_ULR": "nats://x:1", "LOCKSTEP_NAMESPACE": "bad namespace!"}
    proc = subprocess.run(
        [sys.executable, "-m", "lockstep_inventory"],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == (
        "warning: LOCKSTEP_NATS_ULR is not a Lockstep setting; did you mean LOCKSTEP_NATS_URL?"
    )
    assert "invalid settings: namespace" in proc.stderr


def test_the_cli_warns_about_a_misspelt_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from lockstep_cli.main import app

    monkeypatch.setenv("LOCKSTEP_DATABASE_URL", "postgresql://u@127.0.0.1:1/x")
    monkeypatch.setenv("LOCKSTEP_NATS_URL", "nats://127.0.0.1:1")
    monkeypatch.setenv("LOCKSTEP_NAMESAPCE", "x")
    # A service's own variables are the service's to check (it warns in its log): the CLI
    # imports no service, and reads only the shared ones.
    monkeypatch.setenv("LOCKSTEP_INVENTORY_SWEEP_INTERVALS", "5")
    out = CliRunner().invoke(app, ["fleet", "list"]).output
    assert out.splitlines()[0] == (
        "warning: LOCKSTEP_NAMESAPCE is not a Lockstep setting; did you mean LOCKSTEP_NAMESPACE?"
    )
    assert "SWEEP_INTERVALS" not in out
