"""The fleet file ``lockstep fleet import`` reads: YAML or JSON ``nodes: [...]``, or the
simulator's ``/fleet.json`` (a bare list). Validated whole before anything is written.

Credentials are a *reference* (``env:PREFIX`` for ``PREFIX_USERNAME``/``PREFIX_PASSWORD``, or
``file:/path`` to a JSON file): secrets are never stored in the database, sent in events or
logged (design.md, non-negotiable 8). A value that is not a reference is refused, so a pasted
password never reaches the registry. Nor do they cross the network in clear: a BMC whose
``bmc_url`` is ``http://`` is sent them only if its entry says ``allow_plain_http: true``.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lockstep_common.vocabulary import TOKEN_PATTERN

_CREDENTIALS = re.compile(r"^(env:[A-Z][A-Z0-9_]{0,127}|file:/[^\0]{1,4095})$")
Token = Annotated[str, Field(pattern=TOKEN_PATTERN)]


class FleetFileError(ValueError):
    """The file is not a valid fleet; the message names the node and field (never a secret)."""


class NodeEntry(BaseModel):
    """One node of the fleet."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    id: Token = Field(description="Node id (a subject token).")
    bmc_url: str = Field(pattern=r"^https?://[^\s/]+(:\d+)?/?$", description="BMC base URL.")
    profile: str = Field(min_length=1, max_length=64, description="Hardware profile (SKU).")
    supplier: str = Field(default="", max_length=128, description="Who built the node.")
    site: Token = Field(description="Site (a subject token).")
    rack: str = Field(default="", max_length=128, description="Rack.")
    fabric_domain: str = Field(default="", max_length=128, description="NVLink domain.")
    pool: str = Field(default="", max_length=128, description="Scheduler pool.")
    credentials: str = Field(description="env:PREFIX or file:/path; never a secret itself.")
    power_side: str = Field(
        default="", max_length=32, description="Redundant power feed (A, B, ...), if known."
    )
    allow_plain_http: bool = Field(
        default=False,
        description="Send this BMC's credentials over an http:// bmc_url, in clear (a lab or "
        "simulated BMC). Without it an http:// BMC is never sent them and is reported "
        "unreadable.",
    )

    @field_validator("bmc_url")
    @classmethod
    def _no_userinfo(cls, value: str) -> str:
        if "@" in value:
            raise ValueError(
                "bmc_url must not carry credentials (user:password@); name them in credentials"
            )
        return value

    @field_validator("credentials")
    @classmethod
    def _reference(cls, value: str) -> str:
        if not _CREDENTIALS.match(value):
            raise ValueError(
                "credentials must name where secrets are (env:PREFIX or file:/path); "
                "a secret itself is never accepted"
            )
        return value


def parse_fleet(text: str, *, default_credentials: str | None = None) -> list[NodeEntry]:
    """Parse and validate a whole fleet file.

    Args:
        text: YAML or JSON; ``{"nodes": [...]}`` or a bare list (the simulator's /fleet.json).
        default_credentials: used for nodes that name none (the simulator's list has none).

    Raises:
        FleetFileError: naming the node index/id and the field; nothing is returned partially.
    """
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FleetFileError(f"not YAML or JSON: {exc}") from None
    items = doc.get("nodes") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise FleetFileError("expected a non-empty list of nodes (or an object with 'nodes')")
    nodes: list[NodeEntry] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise FleetFileError(f"nodes[{index}] is not an object")
        raw: dict[str, Any] = dict(item)
        if "password" in raw or "username" in raw:
            raise FleetFileError(
                f"nodes[{index}] carries a username/password: reference them with "
                "'credentials: env:PREFIX' or 'credentials: file:/path' instead"
            )
        if "credentials" not in raw and default_credentials is not None:
            raw["credentials"] = default_credentials
        try:
            node = NodeEntry.model_validate(raw)
        except ValidationError as exc:
            where = f"nodes[{index}]" + (
                f" ({raw.get('id')})" if isinstance(raw.get("id"), str) else ""
            )
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise FleetFileError(f"{where}: {problems}") from None
        if node.id in seen:
            raise FleetFileError(f"nodes[{index}]: node id {node.id!r} appears twice")
        seen.add(node.id)
        nodes.append(node)
    return nodes


def dumps(nodes: list[NodeEntry]) -> str:
    """The fleet as JSON (for ``--json`` output; contains references only, no secrets)."""
    return json.dumps([n.model_dump() for n in nodes])
