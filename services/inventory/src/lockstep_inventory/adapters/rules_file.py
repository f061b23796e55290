"""The compatibility table's files: the one packaged with the service, or an operator's.

Read once, at start (``app.load_rules``), and handed to everything that judges drift: the domain
reads no file, and no transaction reads one lazily.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from lockstep_inventory.domain.rules_table import CompatibilityRules, parse_rules


@cache  # the packaged file does not change while the process runs
def packaged_rules() -> CompatibilityRules:
    """The table shipped with the service (``lockstep_inventory/data/compatibility.json``)."""
    resource = resources.files("lockstep_inventory").joinpath("data/compatibility.json")
    return parse_rules(resource.read_bytes())


def read_rules(path: Path) -> CompatibilityRules:
    """An operator's table (``RULES_FILE``); ``OSError`` when it cannot be read,
    ``RulesError`` when it is malformed."""
    return parse_rules(path.read_bytes())
