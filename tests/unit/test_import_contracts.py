"""The layers contracts in pyproject.toml cover every module of every service (and of each
library with layers of its own): a module they do not name is not constrained at all, so a new
one must be placed in its package's layers."""

from __future__ import annotations

import importlib
import pkgutil
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("inventory", "attest", "planner", "updater", "healthgate")
LIBRARIES = ("redfish",)  # libraries with a layers contract of their own
NOT_CODE = {"migrations"}  # SQL files in a package, imported by nothing


def _layered() -> set[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    named: set[str] = set()
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["type"] != "layers":
            continue
        containers = contract.get("containers", [""])
        for layer in contract["layers"]:
            for part in layer.replace(":", "|").split("|"):
                module = part.strip().strip("()")
                named |= {f"{c}.{module}" if c else module for c in containers}
    return named


@pytest.mark.parametrize("service", SERVICES + LIBRARIES)
def test_every_module_of_a_service_is_in_its_layers(service: str) -> None:
    package = importlib.import_module(f"lockstep_{service}")
    modules = {
        f"{package.__name__}.{m.name}"
        for m in pkgutil.iter_modules(package.__path__)
        if m.name not in NOT_CODE
    }
    missing = sorted(modules - _layered())
    assert missing == [], f"not in any layers contract in pyproject.toml: {missing}"


def test_every_workspace_package_is_checked_by_the_contracts() -> None:
    # A member import-linter does not know (say, a new apps/<name>) is outside every contract:
    # lockstep_cli could import it, and through it any service, unseen.
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    roots = set(config["tool"]["importlinter"]["root_packages"])
    members = {
        package.parent.name
        for pattern in config["tool"]["uv"]["workspace"]["members"]
        for package in REPO.glob(f"{pattern}/src/*/__init__.py")
    }
    assert members and members - roots == set()
