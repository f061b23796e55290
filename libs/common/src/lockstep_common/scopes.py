"""Scope selectors as an operator writes them (``--scope site=ams1,pool=batch``) and which
registered nodes one selects: the same answer in the CLI (checking a pin before publishing it)
and in the inventory (applying it)."""

from __future__ import annotations

import re

from lockstep_common.events.v1 import ScopeSelector
from lockstep_common.fleet_file import NodeEntry

_AXES = {
    "site": "sites",
    "pool": "pools",
    "profile": "profiles",
    "fabric_domain": "fabric_domains",
    "node": "nodes",
}


class SelectorError(ValueError):
    """A scope selector that cannot be parsed; the message names the bad part."""


def selects(site: str, s: ScopeSelector, node: NodeEntry) -> bool:
    """True when ``node`` is in ``site`` and in scope ``s`` (what a pin for them covers)."""
    return (
        node.site == site
        and (not s.sites or node.site in s.sites)
        and (not s.pools or node.pool in s.pools)
        and (not s.profiles or node.profile in s.profiles)
        and (not s.fabric_domains or node.fabric_domain in s.fabric_domains)
        and (not s.nodes or node.id in s.nodes)
    )


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
