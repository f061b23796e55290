"""Apply drift scenarios (``scenarios``) to a live simulator, and undo them.

Firmware drifts change the node model the Redfish FirmwareInventory serves; in-band drifts walk
the node agent through its transition table (``agents.state``), never around it; an unreachable
BMC is a request fault added to the live fault plan. Every request is checked completely before
anything changes (design.md non-negotiable 9: bad input changes nothing), and one node carries at
most one drift, so undo is unambiguous. Undo is level-triggered (non-negotiable 4): when
something else already resolved the drift (a rollout re-flashed the member, an operator ran the
seed 004 recovery), it leaves the node alone and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from lockstep_sim.agents.software import CATALOG, NodeSoftware
from lockstep_sim.agents.state import ALLOWED, Phase
from lockstep_sim.bmc import Bmc
from lockstep_sim.faults import Fault
from lockstep_sim.fleet import Node
from lockstep_sim.injection import FaultControl
from lockstep_sim.scenarios import IN_BAND, Drift, DriftKind, ScenarioError, cuda_key, resolve

# A hung request is dropped after this long if nobody clears the drift (faults.Fault.max_seconds).
HANG_MAX_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class Undone:
    drift: Drift
    restored: bool
    """False when the drift was already gone (resolved by something else): nothing changed."""


@dataclass(slots=True)
class _Active:
    drift: Drift
    undo: Callable[[], bool]


@dataclass(slots=True)
class DriftControl:
    """The drifts active on one simulator; ``software`` is attached by ``FleetRuntime`` (a bare
    ``Simulator`` has no node agents, so in-band drifts are refused there)."""

    fleet: Sequence[Node]
    bmcs: Mapping[str, Bmc]
    """Node id -> BMC."""
    faults: FaultControl
    software: Mapping[str, NodeSoftware] = field(default_factory=dict)
    active: dict[str, _Active] = field(default_factory=dict)

    def plan(self) -> list[Drift]:
        """Active drifts, in the order applied."""
        return [a.drift for a in self.active.values()]

    def check(self, drifts: Sequence[Drift]) -> tuple[Drift, ...]:
        """Resolve and check every drift against the live state; raise naming ``drifts[i]``."""
        nodes = {n.id: n for n in self.fleet}
        out: list[Drift] = []
        for i, drift in enumerate(drifts):
            try:
                out.append(self._check_one(drift, nodes, out))
            except ScenarioError as exc:
                raise exc.under(f"drifts[{i}]") from None
        return tuple(out)

    def _check_one(self, drift: Drift, nodes: Mapping[str, Node], earlier: list[Drift]) -> Drift:
        if any(d.node == drift.node for d in earlier):
            raise ScenarioError("node", f"{drift.node} appears twice; one per node")
        node = nodes.get(drift.node)
        if node is None:
            raise ScenarioError("node", f"unknown node {drift.node!r}")
        if drift.node in self.active:
            held = self.active[drift.node].drift.kind
            raise ScenarioError("node", f"{drift.node} already has drift {held}; undo it", 409)
        drift = resolve(drift, node)
        firmware = drift.kind in {DriftKind.SILENT_REVERT, DriftKind.RMA_REPLACEMENT}
        if firmware and self.bmcs[drift.node].flash_lock.locked():
            raise ScenarioError("node", f"{drift.node} has a firmware update running", 409)
        if drift.kind in IN_BAND:
            _check_in_band(drift, self.software.get(drift.node))
        return drift

    def apply(self, drifts: Sequence[Drift]) -> tuple[Drift, ...]:
        """Apply all drifts or none; returns them resolved (defaults filled in)."""
        resolved = self.check(drifts)
        done: list[str] = []
        try:
            for drift in resolved:
                self.active[drift.node] = _Active(drift, self._apply(drift))
                done.append(drift.node)
        except Exception:
            for node_id in reversed(done):  # the checks should make this unreachable
                self.active.pop(node_id).undo()
            raise
        return resolved

    def _apply(self, drift: Drift) -> Callable[[], bool]:
        if drift.kind is DriftKind.UNREACHABLE_BMC:
            return _unreachable(drift, self.faults)
        if drift.kind is DriftKind.GSP_MISMATCH:
            return _gsp_mismatch(drift, self.software[drift.node])
        if drift.kind is DriftKind.CUDA_INCOMPATIBLE:
            return _cuda_incompatible(drift, self.software[drift.node])
        return _firmware(drift, self.bmcs[drift.node])

    def undo(self, node_id: str) -> Undone:
        """Undo the drift on ``node_id``."""
        active = self.active.get(node_id)
        if active is None:
            raise ScenarioError("node", f"no active drift on {node_id!r}")
        restored = active.undo()  # raises ScenarioError (409) when the node cannot be restored
        del self.active[node_id]
        return Undone(active.drift, restored)

    def clear(self) -> tuple[list[Undone], list[ScenarioError]]:
        """Undo every drift, newest first; a drift that cannot be undone now stays active."""
        undone: list[Undone] = []
        refused: list[ScenarioError] = []
        for node_id in reversed(list(self.active)):
            try:
                undone.append(self.undo(node_id))
            except ScenarioError as exc:
                refused.append(exc.under(node_id))
        return undone, refused


def _check_in_band(drift: Drift, software: NodeSoftware | None) -> None:
    if software is None:
        raise ScenarioError("kind", f"no node agent for {drift.node}: run a FleetRuntime")
    assert drift.driver is not None  # noqa: S101 - resolve() filled it in
    if drift.driver not in CATALOG:
        raise ScenarioError("driver", f"unknown driver release; known: {', '.join(CATALOG)}")
    state = software.state
    if software.phase is not Phase.READY or not state.gsp_aligned():
        raise ScenarioError("node", f"agent is in phase {software.phase}, not ready", 409)
    if software.faults.missing_firmware_dir:
        raise ScenarioError("node", "agent fault missing_firmware_dir is set; clear it", 409)
    if drift.kind is DriftKind.GSP_MISMATCH:
        if drift.driver == state.loaded_module or drift.driver in state.firmware_dirs:
            raise ScenarioError("driver", f"{drift.driver} is already installed; name another")
        return
    assert drift.cuda is not None  # noqa: S101 - resolve() filled it in
    supported = CATALOG[drift.driver].cuda
    if cuda_key(drift.cuda) <= cuda_key(supported):
        raise ScenarioError("cuda", f"driver {drift.driver} supports CUDA up to {supported}")


def _firmware(drift: Drift, bmc: Bmc) -> Callable[[], bool]:
    assert drift.member is not None and drift.version is not None  # noqa: S101 - resolved
    component = bmc.node.components[drift.member]
    before = (component.version, component.inactive_version, component.staged)
    old = component.version
    component.version, component.staged = drift.version, False
    if component.banks:
        # silent revert: the device booted its other bank, so the bank it left holds the image
        # we flashed; RMA: a factory spare carries the same factory image in both banks.
        rma = drift.kind is DriftKind.RMA_REPLACEMENT
        component.inactive_version = drift.version if rma else old
    bmc.record("scenario", kind="drift", drift=drift.kind.value, component=drift.member)

    def undo() -> bool:
        if component.version != drift.version:
            return False  # re-flashed since: already resolved
        component.version, component.inactive_version, component.staged = before
        bmc.record("scenario", kind="undo", drift=drift.kind.value, component=drift.member)
        return True

    return undo


def _unreachable(drift: Drift, faults: FaultControl) -> Callable[[], bool]:
    kind = drift.mode or "connection_reset"
    fault = Fault(kind=kind, nodes=(drift.node,), max_seconds=HANG_MAX_SECONDS)
    faults.add(fault)
    # False when a PUT /faults replaced the plan meanwhile: the BMC answers again already.
    return lambda: faults.discard(fault)


def _reinstall(software: NodeSoftware, version: str) -> None:
    """Seed 004 "Procedure" 4-7: reinstall one branch as a unit, DKMS, reboot, through the
    transition table; the missing-dir fault is held off so the reinstall ships its firmware."""
    if Phase.DRIVER_INSTALLED not in ALLOWED[software.phase]:
        raise ScenarioError("node", f"agent is in phase {software.phase}; cannot reinstall", 409)
    knobs = software.faults
    software.faults = replace(knobs, missing_firmware_dir=False)
    try:
        software.install_driver(version)  # also rebuilds DKMS (seed 004 step 5)
        software.reboot()
    finally:
        software.faults = knobs


def _gsp_mismatch(drift: Drift, software: NodeSoftware) -> Callable[[], bool]:
    assert drift.driver is not None  # noqa: S101 - resolved
    original = software.state
    knobs = software.faults
    # Seed 004 "Trigger": an interrupted upgrade ships no /lib/firmware/nvidia/<new>/ directory;
    # the agent's own fault knob does exactly that for its next install.
    software.faults = replace(knobs, missing_firmware_dir=True)
    try:
        software.install_driver(drift.driver)
        software.reboot()  # -> GSP_MISMATCH: module loaded, RmFetchGspRmImages finds no image
    finally:
        software.faults = knobs

    def undo() -> bool:
        if software.phase is not Phase.GSP_MISMATCH or software.state.loaded_module != drift.driver:
            return False
        _reinstall(software, original.driver.version)
        software.install_cuda_toolkit(original.cuda)
        return True

    return undo


def _cuda_incompatible(drift: Drift, software: NodeSoftware) -> Callable[[], bool]:
    assert drift.driver is not None and drift.cuda is not None  # noqa: S101 - resolved
    original = software.state
    if original.driver.version != drift.driver:
        _reinstall(software, drift.driver)  # seed 004 "Rollback": back to the previous branch
    software.install_cuda_toolkit(drift.cuda)

    def undo() -> bool:
        now = software.state
        if (now.driver.version, now.cuda) != (drift.driver, drift.cuda):
            return False
        if original.driver.version != drift.driver:
            _reinstall(software, original.driver.version)
        software.install_cuda_toolkit(original.cuda)
        return True

    return undo
