"""The compatibility table's files: the one packaged with Lockstep, or an operator's.

Read once, at a service's start (:func:`load_rules`), and handed to everything that judges a
stack: the inventory judging drift, the planner judging a rollout's target. Pure code reads no
file, and no transaction reads one lazily.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from lockstep_common.compatibility.table import CompatibilityRules, RulesError, parse_rules
from lockstep_common.errors import ConfigurationError


@cache  # the packaged file does not change while the process runs
def packaged_rules() -> CompatibilityRules:
    """The table shipped with Lockstep (``data/compatibility.json`` beside this module)."""
    resource = resources.files("lockstep_common.compatibility").joinpath("data/compatibility.json")
    return parse_rules(resource.read_bytes())


def read_rules(path: Path) -> CompatibilityRules:
    """An operator's table; ``OSError`` when it cannot be read, ``RulesError`` when it is
    malformed."""
    return parse_rules(path.read_bytes())


def load_rules(path: Path | None, *, setting: str = "rules_file") -> CompatibilityRules:
    """The operator's table at ``path``, else the packaged one; a file that cannot be read or
    parsed refuses the start with one line naming the ``setting`` and what is wrong."""
    if path is None:
        return packaged_rules()
    try:
        return read_rules(path)
    except OSError as exc:
        raise ConfigurationError(f"{setting} {path}: {exc.strerror}") from None
    except RulesError as exc:
        raise ConfigurationError(f"{setting} {path}: {exc}") from None
