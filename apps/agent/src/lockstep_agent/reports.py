"""Turn a node's ``NodeFacts`` into its ``telemetry.observed.inventory`` and
``telemetry.observed.health`` events (pure: no I/O, no clock of its own).

The inventory maps what the probes read onto Lockstep's components, the raw per-device facts
into ``members``; the health report summarises the GPUs the way the healthgate judges a node
(the median SM clock, the hottest GPU, the union of active throttle reasons). NVML's error
counters are cumulative since the driver loaded while the event carries counts since the last
report, so ``Counters`` keeps the previous totals: the first report after a start, and a total
that went down (the driver was reloaded), report what is known, never a negative delta.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from lockstep_agent.probes.node import NodeFacts
from lockstep_common.envelope import source_of
from lockstep_common.events.v1 import HealthObserved, InventoryObserved
from lockstep_common.identities import agent_identity
from lockstep_common.vocabulary import Component, ObservationSource, as_version

MAX_MEMBERS = 1024  # InventoryObserved.members' bound


def agent_source(node_id: str) -> str:
    """The ``source`` of ``node_id``'s agent: the identity it connects as, ``agent-<node>``
    (consumers refuse any other for that node: ``lockstep_common.provenance``)."""
    return source_of(agent_identity(node_id))


def components(facts: NodeFacts) -> dict[Component, str]:
    """Lockstep component -> version, from whichever probe knows it."""
    f, nvml = facts.files, facts.nvml
    out: dict[Component, str] = {}
    driver = nvml.driver_version or (f.driver.version if f.driver else None) or f.loaded_module
    if driver:
        out[Component.DRIVER] = driver
    if f.cuda:
        out[Component.CUDA] = f.cuda
    if f.nccl:
        out[Component.NCCL] = f.nccl
    if f.kernel:
        out[Component.KERNEL] = f.kernel
    gsp = sorted({g.gsp_firmware for g in nvml.gpus if g.gsp_firmware})
    if gsp:
        out[Component.GPU_GSP] = gsp[0]
    vbios = sorted({g.vbios for g in nvml.gpus if g.vbios})
    if vbios:
        out[Component.GPU_VBIOS] = vbios[0]
    nic = sorted(set(f.nic_firmware.values()))
    if nic:
        out[Component.NIC] = nic[0]
    return {k: as_version(v) for k, v in out.items()}


def members(facts: NodeFacts) -> dict[str, str]:
    """Raw per-device facts and what has no component of its own (each a version string)."""
    f, nvml = facts.files, facts.nvml
    out: dict[str, str] = {}
    if f.driver is not None:
        out["proc_driver_version"] = f.driver.version
        out["driver_module_flavour"] = "open" if f.driver.open_module else "proprietary"
    if nvml.cuda_driver_version:
        out["cuda_driver"] = nvml.cuda_driver_version
    if nvml.error:
        out["nvml_error"] = nvml.error
    if facts.xids.error:
        out["xid_error"] = facts.xids.error  # XIDs unknown, not zero
    if facts.diagnostics.errors:  # a DCGM / NCCL result that could not be used, and why
        out["diagnostics_error"] = as_version("; ".join(facts.diagnostics.errors))
    for g in nvml.gpus:
        for key, value in (
            ("vbios", g.vbios),
            ("gsp", g.gsp_firmware),
            ("inforom", g.inforom),
            ("uuid", g.uuid),
        ):
            if value:
                out[f"gpu{g.index}_{key}"] = value
    for dev, version in f.nic_firmware.items():
        out[f"nic_{dev}"] = version
    for e in facts.dkms.entries:
        where = f" for {e.kernel}" if e.kernel else ""
        out[f"dkms_{e.module}_{e.version}"] = f"{e.status}{where}"
    return {k[:256]: as_version(v) for k, v in list(out.items())[:MAX_MEMBERS]}


def agent_inventory(
    node_id: str,
    site: str,
    sequence: int,
    now: datetime,
    *,
    components: dict[Component, str],
    members: dict[str, str],
    firmware_dirs: Iterable[str],
    loaded_module: str | None,
) -> InventoryObserved:
    """The one shape of an agent's inventory report, whatever read the node: the probes here,
    or the simulator's model of a node (``lockstep_sim.agents.reports``)."""
    return InventoryObserved(
        node_id=node_id,
        site=site,
        source=ObservationSource.AGENT,
        observed_at=now,
        sequence=sequence,
        components=components,
        members=members,
        firmware_dirs=tuple(firmware_dirs),
        loaded_module_version=loaded_module,
    )


def inventory_event(
    node_id: str, site: str, facts: NodeFacts, sequence: int, now: datetime
) -> InventoryObserved:
    """The inventory report of one reading."""
    return agent_inventory(
        node_id,
        site,
        sequence,
        now,
        components=components(facts),
        members=members(facts),
        firmware_dirs=facts.files.firmware_dirs,
        loaded_module=facts.files.loaded_module,
    )


@dataclass(slots=True)
class Counters:
    """The previous cumulative NVML error counters, per GPU, to report deltas."""

    last: dict[tuple[int, str], int] = field(default_factory=dict)

    def delta(self, facts: NodeFacts, what: str) -> int | None:
        """The counter's increase since the previous call, summed over GPUs; None when no GPU
        reports it or when this is the first reading of every GPU that does."""
        total, known = 0, False
        for g in facts.nvml.gpus:
            value = getattr(g, what)
            if value is None:
                continue
            before = self.last.get((g.index, what))
            self.last[(g.index, what)] = value
            if before is None:
                continue
            known = True
            total += value - before if value >= before else value
        return total if known else None


def health_event(
    node_id: str,
    site: str,
    facts: NodeFacts,
    heartbeat: int,
    counters: Counters,
    now: datetime,
) -> HealthObserved:
    """The health report of one reading; ``counters`` is updated with its totals."""
    gpus = facts.nvml.gpus
    clocks = [g.sm_clock_mhz for g in gpus if g.sm_clock_mhz is not None]
    temps = [g.temperature_c for g in gpus if g.temperature_c is not None]
    power = [g.power_w for g in gpus if g.power_w is not None]
    remaps = [g.row_remap_pending for g in gpus if g.row_remap_pending is not None]
    reasons = sorted({r for g in gpus for r in g.throttle_reasons})
    diag = facts.diagnostics
    return HealthObserved(
        node_id=node_id,
        site=site,
        observed_at=now,
        xid_counts=facts.xids.counts(),
        sm_clock_mhz=float(statistics.median(clocks)) if clocks else None,
        throttle_reasons=tuple(reasons),
        max_temperature_c=float(max(temps)) if temps else None,
        heartbeat=heartbeat,
        # The mean board power of the node's GPUs: comparable between nodes of one class.
        gpu_power_w=round(statistics.fmean(power), 1) if power else None,
        ecc_sbe_count=counters.delta(facts, "ecc_corrected_volatile"),
        row_remap_pending=sum(remaps) if remaps else None,
        pcie_replay_count=counters.delta(facts, "pcie_replays"),
        nvlink_crc_error_count=counters.delta(facts, "nvlink_crc_errors"),
        dcgm_level=diag.dcgm_level,
        dcgm_passed=diag.dcgm.passed if diag.dcgm else None,
        # A run with wrong results reports no bandwidth worth having: 0, below any expectation.
        nccl_busbw_gbps=(diag.nccl.busbw_gbps if diag.nccl.passed else 0.0) if diag.nccl else None,
        nccl_expected_gbps=diag.nccl_expected_gbps,
    )
