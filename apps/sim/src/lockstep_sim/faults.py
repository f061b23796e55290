"""Fault plans (pure model): which faults hit which nodes and components, parsed from JSON/YAML.

A plan file looks like::

    seed: 7
    faults:
      - kind: http_5xx          # 500/502/503 with Retry-After (reliability.md 7.D1)
        fraction: 0.25           # a seeded, deterministic quarter of the fleet
        status: 503
        count: 2                 # fire twice per node, then answer normally
      - kind: task_stuck         # task stops at 99% (7.D3)
        nodes: [node-00001]
        percent: 99
      - kind: bmc_reboot_mid_task  # BMC unreachable mid-task (7.D2)
        nodes: [node-00002]
        duration_minutes: 3
        resume: true
        forget_state: true       # the reboot loses sessions and tasks (kept in RAM)

Targeting: ``nodes`` (ids) and/or ``fraction`` (0..1, chosen by a hash of the plan seed, the
fault index and the node id, so the same plan hits the same nodes every run); neither means
every node. ``components`` restricts task faults to member ids or component kinds
(``gpu``, ``bmc``...). ``probability`` and ``count`` bound how often a fault fires per node.
Durations are in real BMC minutes and scaled by the simulator's ``time_scale``.

Kinds (request faults fire on every Redfish request of a targeted node; task faults fire in
update/activation jobs for a targeted component; each firing adds a ``kind: "fault"`` ledger
entry):

- ``latency`` (``latency_ms``); ``http_5xx`` (``status`` 500/502/503, ``retry_after`` s);
  ``connection_reset`` (TCP RST, no response); ``hang`` (no answer until the fault is cleared,
  dropped after ``max_seconds``).
- ``task_stuck`` (``percent``; resumes once cleared); ``bmc_reboot_mid_task``
  (``duration_minutes`` unreachable halfway through staging, then ``resume`` or ``Exception``;
  ``forget_state``: the reboot also drops every session and task, as a BMC that keeps them in
  RAM does, so the task monitor answers 404 while the flash goes on);
  ``failed_flash`` (``Exception`` + Update.ApplyFailed, version unchanged); ``silent_revert``
  (old version back ``delay_minutes`` after a successful activation); ``bricked``
  (UnavailableOffline/Critical, no Version); ``wrong_version`` (``version``);
  ``degrade_health`` (sets ``Node.degraded_after_activation`` for the node agents): the
  **bad image** scenario, health drops only on nodes that activated the image (with
  ``image``, only an image of that version: other versions activate cleanly; switching back to
  the other bank ends it).
- Health scenarios hold for as long as they are in the plan, on every targeted node (``count``
  and ``probability`` do not apply; ``racks`` targets whole racks as well): ``thermal_event``
  (``clock_factor`` of the SM clock, hottest GPU ``temperature_rise_c`` up, NVML thermal
  throttle reasons set, busbw down by half the clock loss) and ``network_degraded``
  (``busbw_factor`` of busbw: a fleet-wide fabric problem when it targets every node).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

# Faults checked on every HTTP request, before the Redfish handler runs.
REQUEST_KINDS = frozenset({"latency", "http_5xx", "connection_reset", "hang"})
# Faults applied to an update or activation task of a targeted component.
TASK_KINDS = frozenset(
    {
        "task_stuck",
        "bmc_reboot_mid_task",
        "failed_flash",
        "silent_revert",
        "bricked",
        "wrong_version",
        "degrade_health",
    }
)
# Faults that bend the node agents' health series while they are in the plan.
HEALTH_KINDS = frozenset({"thermal_event", "network_degraded"})
KINDS = REQUEST_KINDS | TASK_KINDS | HEALTH_KINDS
HTTP_5XX = frozenset({500, 502, 503})


class FaultPlanError(ValueError):
    """A plan that cannot be loaded; ``field`` names the bad entry, e.g. ``faults[1].status``."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name
        self.problem = problem


# Fields that only mean something for one health scenario (left out of other kinds' JSON).
_SCENARIO_FIELDS = {
    "clock_factor": ("thermal_event",),
    "temperature_rise_c": ("thermal_event",),
    "busbw_factor": ("network_degraded",),
}


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    nodes: tuple[str, ...] | None = None
    fraction: float | None = None
    components: tuple[str, ...] | None = None
    probability: float = 1.0
    count: int | None = None  # firings per node; None = unlimited
    latency_ms: float = 0.0  # latency
    status: int = 503  # http_5xx
    retry_after: int = 1  # http_5xx, seconds (DSP0266 "Retry-After" on 503)
    max_seconds: float = 60.0  # hang: the request is dropped after this bound
    percent: int = 50  # task_stuck
    duration_minutes: float = 2.0  # bmc_reboot_mid_task (reliability.md D2: 2-10 min)
    resume: bool = True  # bmc_reboot_mid_task: resume the task, or end it in Exception
    forget_state: bool = False  # bmc_reboot_mid_task: sessions and tasks lost at the reboot
    delay_minutes: float = 1.0  # silent_revert
    version: str | None = None  # wrong_version (default: "<flashed>-unexpected")
    image: str | None = None  # degrade_health: only when the activated image is this version
    racks: tuple[str, ...] | None = None  # health scenarios: every node of these racks
    clock_factor: float = 0.8  # thermal_event: SM clocks at 80% (illustrative)
    temperature_rise_c: float = 18.0  # thermal_event: hottest GPU ~80 C instead of ~63 C
    busbw_factor: float = 0.6  # network_degraded: busbw at 60% (reliability.md 7.F5)

    def to_dict(self) -> dict[str, Any]:
        """The fault as plan JSON (unset optional fields, and other kinds' scenario fields,
        left out)."""
        items = asdict(self).items()
        return {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in items
            if v is not None and self.kind in _SCENARIO_FIELDS.get(k, (self.kind,))
        }


@dataclass(frozen=True, slots=True)
class FaultPlan:
    faults: tuple[Fault, ...] = ()
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "faults": [f.to_dict() for f in self.faults]}

    def targets_node(self, index: int, node_id: str, rack: str = "") -> bool:
        """Whether fault ``index`` applies to ``node_id`` (in ``rack``; deterministic for a
        given seed)."""
        fault = self.faults[index]
        if fault.nodes is None and fault.fraction is None and fault.racks is None:
            return True
        if fault.nodes is not None and node_id in fault.nodes:
            return True
        if fault.racks is not None and rack in fault.racks:
            return True
        if fault.fraction is None:
            return False
        digest = hashlib.sha256(f"{self.seed}:{index}:{node_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < fault.fraction


def _targets_component(fault: Fault, member_id: str, kind: str) -> bool:
    return fault.components is None or bool({member_id, kind} & set(fault.components))


@dataclass(slots=True)
class FaultState:
    """A plan plus its firing counters and seeded dice (mutable, still free of I/O)."""

    plan: FaultPlan = field(default_factory=FaultPlan)
    fired: dict[tuple[int, str], int] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)

    def replace(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.fired.clear()
        self.rng = random.Random(plan.seed)  # noqa: S311 - simulation, not cryptography

    def fire(
        self,
        kinds: frozenset[str],
        node_id: str,
        member_id: str = "",
        kind: str = "",
        image: str = "",
    ) -> Fault | None:
        """The first fault of ``kinds`` that fires now for this node (and component, if any;
        and activated ``image``, for a fault that names one); firing counts against the
        fault's ``count``."""
        for index, fault in enumerate(self.plan.faults):
            if fault.kind not in kinds or not self.plan.targets_node(index, node_id):
                continue
            if fault.image is not None and fault.image != image:
                continue
            if member_id and not _targets_component(fault, member_id, kind):
                continue
            done = self.fired.get((index, node_id), 0)
            if fault.count is not None and done >= fault.count:
                continue
            if fault.probability < 1.0 and self.rng.random() >= fault.probability:
                continue
            self.fired[(index, node_id)] = done + 1
            return fault
        return None

    def active(self, fault: Fault) -> bool:
        return fault in self.plan.faults

    def add(self, fault: Fault) -> None:
        """Append one fault, keeping every other fault's firing count (a drift scenario adds
        its own request fault on top of whatever plan is loaded)."""
        self.plan = FaultPlan((*self.plan.faults, fault), self.plan.seed)

    def discard(self, fault: Fault) -> bool:
        """Remove exactly this fault object (not an equal one a plan also holds); counters of
        the others follow their new index. False when it is no longer in the plan."""
        index = next((i for i, f in enumerate(self.plan.faults) if f is fault), None)
        if index is None:
            return False
        self.plan = FaultPlan(
            self.plan.faults[:index] + self.plan.faults[index + 1 :], self.plan.seed
        )
        self.fired = {
            (i - (i > index), node): n for (i, node), n in self.fired.items() if i != index
        }
        return True


_TYPES: dict[str, tuple[type, ...]] = {
    "latency_ms": (int, float),
    "max_seconds": (int, float),
    "duration_minutes": (int, float),
    "delay_minutes": (int, float),
    "probability": (int, float),
    "fraction": (int, float),
    "count": (int,),
    "status": (int,),
    "retry_after": (int,),
    "percent": (int,),
    "resume": (bool,),
    "forget_state": (bool,),
    "version": (str,),
    "image": (str,),
    "clock_factor": (int, float),
    "temperature_rise_c": (int, float),
    "busbw_factor": (int, float),
}


_OPTIONAL = frozenset({"nodes", "fraction", "components", "count", "version", "racks", "image"})


def _strings(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FaultPlanError(name, "must be a list of strings")
    return tuple(value)


def parse_fault(raw: Any, where: str) -> Fault:
    if not isinstance(raw, dict):
        raise FaultPlanError(where, "must be a mapping")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise FaultPlanError(f"{where}.kind", f"must be one of {', '.join(sorted(KINDS))}")
    values: dict[str, Any] = {"kind": kind}
    for key, value in raw.items():
        name = f"{where}.{key}"
        if key == "kind" or (key in _OPTIONAL and value is None):
            continue
        if key in {"nodes", "components", "racks"}:
            values[key] = _strings(value, name)
        elif key in _TYPES:
            bad_bool = isinstance(value, bool) and bool not in _TYPES[key]
            if bad_bool or not isinstance(value, _TYPES[key]):
                raise FaultPlanError(name, f"must be of type {_TYPES[key][0].__name__}")
            values[key] = value
        else:
            raise FaultPlanError(name, "unknown field")
    fault = Fault(**values)
    _check_ranges(fault, where)
    return fault


def _check_ranges(fault: Fault, where: str) -> None:
    for name in ("fraction", "probability", "clock_factor", "busbw_factor"):
        value = getattr(fault, name)
        if value is not None and not 0.0 <= value <= 1.0:
            raise FaultPlanError(f"{where}.{name}", "must be between 0 and 1")
    if fault.status not in HTTP_5XX:
        raise FaultPlanError(f"{where}.status", "must be 500, 502 or 503")
    if not 0 <= fault.percent <= 100:
        raise FaultPlanError(f"{where}.percent", "must be between 0 and 100")
    for name in ("count", "retry_after", "latency_ms", "duration_minutes", "delay_minutes"):
        value = getattr(fault, name)
        if value is not None and value < 0:
            raise FaultPlanError(f"{where}.{name}", "must not be negative")
    if fault.temperature_rise_c < 0:
        raise FaultPlanError(f"{where}.temperature_rise_c", "must not be negative")
    if fault.max_seconds <= 0:
        raise FaultPlanError(f"{where}.max_seconds", "must be positive")


def parse_plan(raw: Any) -> FaultPlan:
    """A plan from decoded JSON/YAML: ``{"seed": int, "faults": [...]}`` or a bare list."""
    if isinstance(raw, list):
        raw = {"faults": raw}
    if not isinstance(raw, dict):
        raise FaultPlanError("plan", "must be a mapping with a 'faults' list")
    unknown = set(raw) - {"seed", "faults"}
    if unknown:
        raise FaultPlanError(sorted(unknown)[0], "unknown field")
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise FaultPlanError("seed", "must be an integer")
    faults = raw.get("faults", [])
    if not isinstance(faults, list):
        raise FaultPlanError("faults", "must be a list")
    return FaultPlan(tuple(parse_fault(f, f"faults[{i}]") for i, f in enumerate(faults)), seed)


def load_faults(path: str | Path) -> FaultPlan:
    """Load a plan from a ``.json`` or ``.yaml``/``.yml`` file; errors name the file and field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise FaultPlanError(str(path), f"cannot read: {exc.strerror}") from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise FaultPlanError(str(path), f"not valid {kind}: {exc}") from None
    try:
        return parse_plan(raw)
    except FaultPlanError as exc:
        raise FaultPlanError(f"{path}: {exc.field}", exc.problem) from None
