"""Named drift scenarios (pure): what goes wrong on which node, parsed, resolved and planned.

A drift is one thing an SRE finds on a node that no rollout put there (design.md "drift"). The
kinds follow what the inventory service classifies:

- ``silent_revert``: a FirmwareInventory member boots its other bank (reliability.md's "silent
  revert"): Redfish reports an older ``Version`` and no update task exists.
- ``rma_replacement``: one GPU board swapped by the vendor; the spare carries its factory VBIOS,
  so one GPU member disagrees with its siblings.
- ``gsp_mismatch``: seed 004. An interrupted driver upgrade leaves the new module loaded and no
  ``/lib/firmware/nvidia/<new>/`` directory; GSP stays on the old version.
- ``cuda_incompatible``: a CUDA toolkit the installed driver does not support (standards.md
  section 7); the default pair is R570 + CUDA 13.0, which the inventory's compatibility table
  flags twice (``cuda_major_floor``: 13.x needs >= 580; ``branch_max_cuda_major``: R570 <= 12).
- ``unreachable_bmc``: the BMC resets connections or hangs (the request faults of ``faults``).

``lockstep_sim.drifts`` applies a resolved plan to a live simulator and undoes it.
"""

from __future__ import annotations

import enum
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from lockstep_sim.fleet import Node

MAX_VERSION = 64
# R580 point release after the fleet's 580.65.06: an unattended-upgrades run inside the LTSB is
# the common way a node gets a new module without its GSP firmware (seed 004 "Trigger").
GSP_DRIVER = "580.95.05"
# Seed 004 "Rollback": a node left on the previous branch; CUDA 13.0 then installed by hand.
CUDA_DRIVER = "570.172.08"
CUDA_TOOLKIT = "13.0"
UNREACHABLE_MODES = ("connection_reset", "hang")
_CUDA = re.compile(r"^(\d+)\.(\d+)$")


class DriftKind(enum.StrEnum):
    SILENT_REVERT = "silent_revert"
    RMA_REPLACEMENT = "rma_replacement"
    GSP_MISMATCH = "gsp_mismatch"
    CUDA_INCOMPATIBLE = "cuda_incompatible"
    UNREACHABLE_BMC = "unreachable_bmc"


# Which optional fields each kind accepts (anything else is refused, naming the field).
FIELDS: dict[DriftKind, frozenset[str]] = {
    DriftKind.SILENT_REVERT: frozenset({"member", "version"}),
    DriftKind.RMA_REPLACEMENT: frozenset({"member", "version"}),
    DriftKind.GSP_MISMATCH: frozenset({"driver"}),
    DriftKind.CUDA_INCOMPATIBLE: frozenset({"driver", "cuda"}),
    DriftKind.UNREACHABLE_BMC: frozenset({"mode"}),
}
IN_BAND = frozenset({DriftKind.GSP_MISMATCH, DriftKind.CUDA_INCOMPATIBLE})
MIX_ORDER = tuple(DriftKind)


class ScenarioError(ValueError):
    """Refused drift input; ``field`` names it (``drifts[2].member``). ``status`` is 400 for bad
    input and 409 when the node's current state forbids the drift."""

    def __init__(self, field_name: str, problem: str, status: int = 400) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name
        self.problem = problem
        self.status = status

    def under(self, prefix: str) -> ScenarioError:
        return ScenarioError(f"{prefix}.{self.field}", self.problem, self.status)


@dataclass(frozen=True, slots=True)
class Drift:
    """One drift on one node; unset optional fields are filled in by :func:`resolve`."""

    kind: DriftKind
    node: str
    member: str | None = None
    """silent_revert / rma_replacement: the FirmwareInventory member id."""
    version: str | None = None
    """silent_revert / rma_replacement: the Version Redfish reports afterwards."""
    driver: str | None = None
    """gsp_mismatch: the module that ends up loaded; cuda_incompatible: the installed driver."""
    cuda: str | None = None
    """cuda_incompatible: the toolkit the agent reports."""
    mode: str | None = None
    """unreachable_bmc: ``connection_reset`` (TCP RST) or ``hang`` (no answer)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, unset fields left out (the ``POST /scenario`` drift shape)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}
        return {**out, "kind": self.kind.value}


def _text(raw: dict[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_VERSION:
        raise ScenarioError(key, f"must be a non-empty string of at most {MAX_VERSION} characters")
    return value


def parse_drift(raw: Any) -> Drift:
    """One drift from decoded JSON; errors name the field relative to the drift."""
    if not isinstance(raw, dict):
        raise ScenarioError("<drift>", "must be a JSON object")
    name = raw.get("kind")
    if not isinstance(name, str) or name not in {k.value for k in DriftKind}:
        raise ScenarioError("kind", f"must be one of {', '.join(DriftKind)}")
    kind = DriftKind(name)
    node = raw.get("node")
    if not isinstance(node, str) or not node:
        raise ScenarioError("node", "must be a node id such as 'node-00012'")
    for key in raw:
        if key not in {"kind", "node"} | FIELDS[kind]:
            raise ScenarioError(key, f"unknown field for {kind}")
    values = {key: _text(raw, key) for key in FIELDS[kind]}
    mode = values.get("mode")
    if mode is not None and mode not in UNREACHABLE_MODES:
        raise ScenarioError("mode", f"must be one of {', '.join(UNREACHABLE_MODES)}")
    cuda = values.get("cuda")
    if cuda is not None and not _CUDA.match(cuda):
        raise ScenarioError("cuda", "must be a toolkit version 'major.minor', e.g. '13.0'")
    return Drift(kind, node, **values)


def parse_drifts(raw: Any) -> tuple[Drift, ...]:
    """``{"drifts": [...]}`` -> drifts; one drift per node, errors name ``drifts[i].field``."""
    if not isinstance(raw, dict):
        raise ScenarioError("body", "must be {'drifts': [...]} or {'mix': 'default'}")
    unknown = sorted(set(raw) - {"drifts"})
    if unknown:
        raise ScenarioError(unknown[0], "unknown field")
    items = raw.get("drifts")
    if not isinstance(items, list) or not items:
        raise ScenarioError("drifts", "must be a non-empty list")
    out: list[Drift] = []
    for i, item in enumerate(items):
        try:
            drift = parse_drift(item)
        except ScenarioError as exc:
            raise exc.under(f"drifts[{i}]") from None
        if any(d.node == drift.node for d in out):
            raise ScenarioError(f"drifts[{i}].node", f"{drift.node} appears twice; one per node")
        out.append(drift)
    return tuple(out)


def cuda_key(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _members(node: Node, kind: str) -> list[str]:
    return [m for m, c in node.components.items() if c.cls.kind == kind]


def _revert_member(node: Node) -> str:
    """The BMC when its class names an older supported release, else the first GPU VBIOS."""
    for member_id in (*_members(node, "bmc"), *_members(node, "gpu")):
        if node.components[member_id].cls.lowest_supported is not None:
            return member_id
    raise ScenarioError("member", f"{node.id} has no member with a known older version")


def _rma_member(node: Node) -> str:
    gpus = _members(node, "gpu")
    if not gpus:
        raise ScenarioError("member", f"{node.id} has no GPU members")
    return gpus[min(2, len(gpus) - 1)]  # the third GPU: any board but the first fails too


def _firmware(drift: Drift, node: Node) -> Drift:
    member = drift.member
    if member is None:
        member = (
            _revert_member(node) if drift.kind is DriftKind.SILENT_REVERT else _rma_member(node)
        )
    component = node.components.get(member)
    if component is None:
        raise ScenarioError("member", f"{node.id} has no FirmwareInventory member {member!r}")
    if drift.kind is DriftKind.RMA_REPLACEMENT and component.cls.kind != "gpu":
        raise ScenarioError("member", f"{member} is a {component.cls.kind}, not a GPU VBIOS")
    if component.bricked:
        raise ScenarioError("member", f"{member} is bricked and reports no version", 409)
    # LowestSupportedVersion is the oldest image the vendor still ships: a plausible previous
    # bank for a revert, and what a depot spare was flashed with at the factory.
    version = drift.version or component.cls.lowest_supported
    if version is None:
        raise ScenarioError("version", f"required: {member} has no LowestSupportedVersion")
    if version == component.version:
        raise ScenarioError("version", f"{member} already reports {version}; that is no drift")
    return replace(drift, member=member, version=version)


def resolve(drift: Drift, node: Node) -> Drift:
    """``drift`` with every default filled in from ``node``'s model (pure)."""
    if drift.kind in {DriftKind.SILENT_REVERT, DriftKind.RMA_REPLACEMENT}:
        return _firmware(drift, node)
    if drift.kind is DriftKind.GSP_MISMATCH:
        return replace(drift, driver=drift.driver or GSP_DRIVER)
    if drift.kind is DriftKind.CUDA_INCOMPATIBLE:
        return replace(drift, driver=drift.driver or CUDA_DRIVER, cuda=drift.cuda or CUDA_TOOLKIT)
    return replace(drift, mode=drift.mode or "connection_reset")


def default_mix(fleet: Sequence[Node], seed: int = 0) -> tuple[Drift, ...]:
    """One drift of every kind on distinct nodes drawn by ``seed`` (same seed, same plan)."""
    if len(fleet) < len(MIX_ORDER):
        raise ValueError(f"the default mix needs at least {len(MIX_ORDER)} nodes")
    rng = random.Random(seed)  # noqa: S311 - simulation, not cryptography
    nodes = rng.sample(list(fleet), len(MIX_ORDER))
    return tuple(
        resolve(Drift(kind, node.id), node) for kind, node in zip(MIX_ORDER, nodes, strict=True)
    )


def parse_request(raw: Any, fleet: Sequence[Node]) -> tuple[Drift, ...]:
    """A ``POST /scenario`` body: ``{"drifts": [...]}`` or ``{"mix": "default", "seed": 7}``."""
    if isinstance(raw, dict) and "mix" in raw:
        unknown = sorted(set(raw) - {"mix", "seed"})
        if unknown:
            raise ScenarioError(unknown[0], "unknown field")
        if raw["mix"] != "default":
            raise ScenarioError("mix", "must be 'default'")
        seed = raw.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ScenarioError("seed", "must be an integer")
        try:
            return default_mix(fleet, seed)
        except ValueError as exc:
            raise ScenarioError("mix", str(exc)) from None
    return parse_drifts(raw)
