"""What ``lockstep up`` migrates as the admin is what each service migrates at start."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from lockstep_cli.schemas import service_migrations
from lockstep_cli.supervisor import SERVICES
from lockstep_common import db

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", SERVICES)
def test_the_admin_applies_the_migrations_the_service_itself_declares(name: str) -> None:
    source = inspect.getsource(importlib.import_module(f"lockstep_{name}.app"))
    declared = re.findall(r'migration_package="([\w.]+)"', source)
    expected = db.messaging_migrations()
    for package in declared:
        expected += db.load_migrations(name, package)
    assert service_migrations(name) == expected
