"""Scope selectors as operators type them: ``site=ams1,pool=training,node=n1``.

Shared by the CLI, which parses what the operator typed before anything is asked, and the
inventory, which takes selectors in pins; both read the same grammar here.
"""

from __future__ import annotations

import re

from lockstep_common.events.v1 import ScopeSelector

_AXES = {
    "site": "sites",
    "pool": "pools",
    "profile": "profiles",
    "fabric_domain": "fabric_domains",
    "node": "nodes",
}


class SelectorError(ValueError):
    """A scope selector that cannot be parsed; the message names the bad part."""


def parse_selector(text: str) -> ScopeSelector:
    """``site=ams1,pool=training,pool=batch,profile=gb200,node=n1`` -> ScopeSelector.

    Keys: site, pool, profile, fabric_domain, node; repeat a key for several values. An empty
    text selects everything.
    """
    axes: dict[str, list[str]] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise SelectorError(f"{part!r}: expected key=value")
        if key not in _AXES:
            raise SelectorError(f"{key!r}: unknown key (use {', '.join(_AXES)})")
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,256}", value):
            raise SelectorError(f"{part!r}: value has characters outside A-Z a-z 0-9 _ . : -")
        axes.setdefault(_AXES[key], []).append(value)
    try:
        return ScopeSelector.model_validate({k: tuple(v) for k, v in axes.items()})
    except ValueError as exc:
        raise SelectorError(str(exc)) from None
