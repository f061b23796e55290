"""Reading gate policies: the packaged default, or an operator's TOML or JSON file."""

from __future__ import annotations

import json
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from lockstep_gate.policy import Policy, PolicyError, parse_policy

DEFAULT_POLICY = "default_policy.toml"


def _decode(text: str, *, json_file: bool, origin: str) -> dict[str, Any]:
    try:
        data = json.loads(text) if json_file else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PolicyError(f"{origin}: not valid {'JSON' if json_file else 'TOML'}: {exc}") from None
    if not isinstance(data, dict):
        raise PolicyError(f"{origin}: the top level must be a table of settings")
    return data


@cache
def default_policy() -> Policy:
    """The policy shipped in ``lockstep_gate/data/default_policy.toml``."""
    text = resources.files("lockstep_gate").joinpath("data", DEFAULT_POLICY).read_text()
    return parse_policy(
        _decode(text, json_file=False, origin=DEFAULT_POLICY), origin=DEFAULT_POLICY
    )


def load_policy(path: Path) -> Policy:
    """A policy file: JSON when it ends in ``.json``, else TOML. :class:`PolicyError` (one line)
    when it cannot be read or is not valid."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PolicyError(f"policy {path}: cannot be read: {reason}") from None
    origin = f"policy {path}"
    data = _decode(text, json_file=path.suffix.lower() == ".json", origin=origin)
    return parse_policy(data, origin=origin)
