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
from collections.abc import Collection, Sequence
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lockstep_common.vocabulary import TOKEN_PATTERN

_CREDENTIALS = re.compile(r"^(env:[A-Z][A-Z0-9_]{0,127}|file:/[^\0]{1,4095})$")
Token = Annotated[str, Field(pattern=TOKEN_PATTERN)]


class FleetFileError(ValueError):
    """The file is not a valid fleet; the message names the node and field (never a secret).

    ``problems`` holds one line per bad node, every one of them (not only the first), so an
    operator fixes a file in one pass.
    """

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems) or (message,)


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


def parse_fleet(
    text: str,
    *,
    default_credentials: str | None = None,
    known_profiles: Collection[str] | None = None,
) -> list[NodeEntry]:
    """Parse and validate a whole fleet file.

    Args:
        text: YAML or JSON; ``{"nodes": [...]}`` or a bare list (the simulator's /fleet.json).
        default_credentials: used for nodes that name none (the simulator's list has none).
        known_profiles: the hardware profiles the compatibility rules describe; a node of
            another profile is refused (None: any profile).

    Raises:
        FleetFileError: naming every bad node by index/id and field; nothing is returned
            partially.
    """
    doc = _load(text)
    items = doc.get("nodes") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise FleetFileError("expected a non-empty list of nodes (or an object with 'nodes')")
    nodes: list[NodeEntry] = []
    problems: list[str] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        node, problem = _entry(index, item, default_credentials, known_profiles)
        if node is not None and node.id in seen:
            problem = f"nodes[{index}]: node id {node.id!r} appears twice"
        if problem is not None:
            problems.append(problem)
            continue
        assert node is not None  # noqa: S101 - no problem means a node
        seen.add(node.id)
        nodes.append(node)
    if problems:
        many = f"{len(problems)} invalid nodes: {problems[0]}; ..."
        raise FleetFileError(problems[0] if len(problems) == 1 else many, problems)
    return nodes


def _load(text: str) -> Any:
    """The document: JSON first (a simulator's /fleet.json, a generated file; YAML 1.2 is a
    superset, and the pure-Python YAML parser takes 30 s over a 12,500-node file), else YAML
    (with libyaml's parser where PyYAML was built with it)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise FleetFileError(f"not YAML or JSON: {exc}") from None


def _entry(
    index: int,
    item: object,
    default_credentials: str | None,
    known_profiles: Collection[str] | None,
) -> tuple[NodeEntry | None, str | None]:
    """One node of the file, or what is wrong with it."""
    if not isinstance(item, dict):
        return None, f"nodes[{index}] is not an object"
    raw: dict[str, Any] = dict(item)
    where = f"nodes[{index}]" + (f" ({raw['id']})" if isinstance(raw.get("id"), str) else "")
    if "password" in raw or "username" in raw:
        return None, (
            f"{where} carries a username/password: reference them with "
            "'credentials: env:PREFIX' or 'credentials: file:/path' instead"
        )
    if "credentials" not in raw and default_credentials is not None:
        raw["credentials"] = default_credentials
    try:
        node = NodeEntry.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        return None, f"{where}: {problems}"
    if known_profiles is not None and node.profile not in known_profiles:
        return None, (
            f"{where}: profile {node.profile!r} is not in the compatibility rules (known: "
            f"{', '.join(sorted(known_profiles))}; a new profile goes in the rules file, "
            "LOCKSTEP_INVENTORY_RULES_FILE)"
        )
    return node, None


def dumps(nodes: list[NodeEntry]) -> str:
    """The fleet as JSON (for ``--json`` output; contains references only, no secrets)."""
    return json.dumps([n.model_dump() for n in nodes])
