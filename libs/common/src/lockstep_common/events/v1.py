"""Version 1 of every event in the catalogue (design.md, "Events").

Each class is one CloudEvents ``type`` at ``schemaversion`` 1. Fields carry descriptions: they
become the JSON Schemas and the AsyncAPI document in ``docs/`` (``lockstep docs generate``).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from lockstep_common.envelope import EventData
from lockstep_common.maintenance import MaintenanceError, parse_schedule
from lockstep_common.vocabulary import (
    TEXT_MAX,
    ChangeClass,
    CheckResult,
    Component,
    DriftKind,
    GateVerdict,
    NodeId,
    ObservationSource,
    RollbackMechanism,
    RolloutId,
    Severity,
    SiteId,
    StackHash,
    Text,
    Version,
)

Name = Annotated[str, Field(min_length=1, max_length=256)]
ProfileStack = dict[Component, Version]

# Every list, map and number is bounded, so no producer can make a consumer hold, store or
# compare unbounded data (issue 15). Node lists fit a whole 12,500-node fleet's wave with room to
# spare; in practice the 1 MiB message limit binds first. Counts fit PostgreSQL's integer, the
# report sequence its bigint.
MAX_NODES = 50_000
MAX_ITEMS = 1024
MAX_SMALL = 64
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class Part(BaseModel):
    """Base of value objects nested inside events."""

    # No NaN or infinity: a gate comparing medians, or a column storing them, would be fooled.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class ScopeSelector(Part):
    """Which nodes something applies to; empty lists mean "no restriction on this axis"."""

    sites: tuple[SiteId, ...] = Field(
        default=(), max_length=MAX_ITEMS, description="Sites to include."
    )
    pools: tuple[Name, ...] = Field(
        default=(), max_length=MAX_ITEMS, description="Scheduler pools to include."
    )
    profiles: tuple[Name, ...] = Field(
        default=(), max_length=MAX_ITEMS, description="Hardware profiles to include."
    )
    fabric_domains: tuple[Name, ...] = Field(
        default=(), max_length=MAX_ITEMS, description="Fabric domains to include."
    )
    nodes: tuple[NodeId, ...] = Field(
        default=(), max_length=MAX_NODES, description="Explicit node ids to include."
    )


# --- bundles ----------------------------------------------------------------------------------


class BundleSubmitted(EventData):
    """A bundle was handed to Lockstep for attestation."""

    event_type: ClassVar[str] = "bundle.submitted"
    schema_version: ClassVar[int] = 1

    bundle_uri: Annotated[str, Field(min_length=1, max_length=2048)] = Field(
        description="Where the bundle is (file path, file:// or https:// URI)."
    )
    submitted_by: Name = Field(description="Who submitted it (user or CI job).")
    note: Text | None = Field(default=None, description="Free-text reason for the submission.")


class CheckVerdict(Part):
    """One attestation check and its result."""

    check: Name = Field(description="Check name, e.g. manifest_signature, image_digest.")
    result: CheckResult = Field(description="pass or fail.")
    reason: Text = Field(description="Why, naming the file or field concerned.")
    duration_ms: float = Field(ge=0, le=INT64_MAX, description="How long the check took.")


class AttestedComponent(Part):
    """One image of an attested bundle, as its signed manifest describes it: what the planner
    orders (A/B before one-way) and what the updater fetches and re-hashes before each push."""

    profile: Name = Field(description="Hardware profile the image is for.")
    component: Component = Field(description="Component it updates.")
    version: Version = Field(description="Exact version it installs.")
    image: Annotated[str, Field(min_length=1, max_length=1024)] = Field(
        description="Path of the image inside the bundle (under images/)."
    )
    sha384: Annotated[str, Field(pattern=r"^[0-9a-f]{96}$")] = Field(
        description="SHA-384 of the image, lower-case hex."
    )
    size: int = Field(ge=0, le=INT64_MAX, description="Image size in bytes.")
    banks: Annotated[str, Field(pattern=r"^(ab|one_way)$")] = Field(
        description="ab (rollback by bank flip) or one_way."
    )
    activation: Annotated[str, Field(pattern=r"^(immediate|reset|ac_cycle|reboot|in_band)$")] = (
        Field(description="What makes the new image run.")
    )
    lowest_supported_version: Version | None = Field(
        default=None, description="Oldest version the device may run after this update."
    )


class BundleAttested(EventData):
    """Every check passed: the bundle's golden stack may be pinned and staged."""

    event_type: ClassVar[str] = "bundle.attested"
    schema_version: ClassVar[int] = 1

    bundle_id: Name = Field(description="Bundle id from the manifest.")
    bundle_version: Version = Field(description="Bundle version from the manifest.")
    stack_hash: StackHash = Field(description="Canonical hash of the golden stack.")
    checks: tuple[CheckVerdict, ...] = Field(
        max_length=MAX_ITEMS, description="Every check with its result."
    )
    bundle_uri: Annotated[str, Field(min_length=1, max_length=2048)] | None = Field(
        default=None, description="Where the attested bundle is (images are fetched from it)."
    )
    components: tuple[AttestedComponent, ...] = Field(
        default=(), max_length=MAX_ITEMS, description="Every image, per profile and component."
    )


class BundleRejected(EventData):
    """At least one check failed: nothing from this bundle may be staged."""

    event_type: ClassVar[str] = "bundle.rejected"
    schema_version: ClassVar[int] = 1

    bundle_uri: Annotated[str, Field(min_length=1, max_length=2048)] = Field(
        description="Where the rejected bundle is."
    )
    bundle_id: Name | None = Field(default=None, description="Bundle id, if the manifest parsed.")
    checks: tuple[CheckVerdict, ...] = Field(
        max_length=MAX_ITEMS, description="Every check with its result."
    )


# --- intents and rollouts ---------------------------------------------------------------------


class Strategy(Part):
    """Overrides of the change class's default rollout strategy."""

    canary_nodes: int | None = Field(
        default=None, ge=1, le=INT32_MAX, description="Canary size in nodes."
    )
    wave_fractions: tuple[Annotated[float, Field(gt=0, le=1)], ...] | None = Field(
        default=None,
        max_length=MAX_SMALL,
        description="Cumulative fraction of scope per wave, e.g. 0.05, 0.25, 1.0.",
    )
    max_unavailable: int | None = Field(
        default=None, ge=1, le=INT32_MAX, description="Most nodes out of service per pool at once."
    )
    soak_seconds: int | None = Field(
        default=None, ge=0, le=INT32_MAX, description="Soak after each wave."
    )


class IntentSubmitted(EventData):
    """A planner asks to move a scope to an attested bundle under a change class."""

    event_type: ClassVar[str] = "intent.submitted"
    schema_version: ClassVar[int] = 1

    intent_id: uuid.UUID = Field(description="Id of this intent.")
    stack_hash: StackHash = Field(description="Target golden stack.")
    scope: ScopeSelector = Field(description="Which nodes to move.")
    change_class: ChangeClass = Field(description="Decides approvals, canary width and soak.")
    approval_ref: Name | None = Field(default=None, description="Change ticket or approval id.")
    submitted_by: Name = Field(description="Who asked.")
    strategy: Strategy = Field(default_factory=Strategy, description="Strategy overrides.")
    dry_run: bool = Field(default=False, description="Plan only; execute nothing.")
    plan_hash: StackHash | None = Field(
        default=None,
        description="Start only the plan with this hash (the one reviewed with a dry run); "
        "refused, naming the difference, when the plan comes out otherwise.",
    )


class WavePlan(Part):
    """One wave of a rollout plan."""

    number: int = Field(ge=0, le=INT32_MAX, description="0 is the canary.")
    node_ids: tuple[NodeId, ...] = Field(max_length=MAX_NODES, description="Nodes in this wave.")


class RolloutPlanned(EventData):
    """The planner turned an intent into a rollout."""

    event_type: ClassVar[str] = "rollout.planned"
    schema_version: ClassVar[int] = 1

    rollout_id: RolloutId = Field(description="Rollout id.")
    intent_id: uuid.UUID = Field(description="The intent it serves.")
    stack_hash: StackHash = Field(description="Target golden stack.")
    change_class: ChangeClass = Field(description="Change class of the intent.")
    waves: tuple[WavePlan, ...] = Field(
        max_length=MAX_ITEMS, description="The whole plan, canary first."
    )
    dry_run: bool = Field(default=False, description="True when nothing will be executed.")


class RolloutHalted(EventData):
    """A rollout stopped before completing."""

    event_type: ClassVar[str] = "rollout.halted"
    schema_version: ClassVar[int] = 1

    rollout_id: RolloutId = Field(description="Rollout id.")
    wave: int = Field(ge=0, le=INT32_MAX, description="The wave that was current when it halted.")
    reason: Text = Field(description="Why it stopped (gate tripped, operator abort, ...).")
    halted_by: Name = Field(description="gate, operator name, or policy.")


class RolloutCompleted(EventData):
    """Every wave of a rollout finished and passed its gate."""

    event_type: ClassVar[str] = "rollout.completed"
    schema_version: ClassVar[int] = 1

    rollout_id: RolloutId = Field(description="Rollout id.")
    nodes_updated: int = Field(ge=0, le=INT32_MAX, description="Nodes now at the target stack.")
    nodes_failed: int = Field(
        ge=0, le=INT32_MAX, description="Nodes that failed and were quarantined."
    )


class WaveStratum(Part):
    """One stratum of a wave (hardware profile x supplier x current stack hash): the nodes the
    wave updates and the concurrent control group of untouched nodes of the same stratum that
    the healthgate compares them with over the same window."""

    key: Name = Field(description="The stratum, e.g. gb200/acme/<stack hash prefix>.")
    node_ids: tuple[NodeId, ...] = Field(
        max_length=MAX_NODES, description="Nodes of this stratum the wave updates."
    )
    control_ids: tuple[NodeId, ...] = Field(
        default=(), max_length=MAX_NODES, description="Untouched nodes of the same stratum."
    )


class WavePlanned(EventData):
    """A wave released to the updater."""

    event_type: ClassVar[str] = "wave.planned"
    schema_version: ClassVar[int] = 1

    rollout_id: RolloutId = Field(description="Rollout id.")
    wave: int = Field(ge=0, le=INT32_MAX, description="Wave number; 0 is the canary.")
    node_ids: tuple[NodeId, ...] = Field(
        max_length=MAX_NODES, description="Nodes the updater may touch in this wave."
    )
    components: tuple[Component, ...] = Field(
        max_length=MAX_SMALL, description="Components in the order to apply."
    )
    max_unavailable: int = Field(
        ge=1, le=INT32_MAX, description="Most nodes out of service per pool at once."
    )
    failure_budget: int = Field(
        ge=0, le=INT32_MAX, description="Failed nodes tolerated before halting."
    )
    soak_seconds: int = Field(ge=0, le=INT32_MAX, description="Soak after the wave before gating.")
    strata: tuple[WaveStratum, ...] = Field(
        default=(),
        max_length=MAX_ITEMS,
        description="The wave's nodes by stratum, each with its control group (for the gate).",
    )
    reflash: tuple[Component, ...] = Field(
        default=(),
        max_length=MAX_SMALL,
        description="Components whose flip-back after a tripped gate re-flashes the previous "
        "attested image, a forced downgrade, as the approved plan says (its hash covers it); "
        "empty: none (a one-way flip-back then fails before any drain).",
    )


class WaveCompleted(EventData):
    """The updater finished a wave."""

    event_type: ClassVar[str] = "wave.completed"
    schema_version: ClassVar[int] = 1

    rollout_id: RolloutId = Field(description="Rollout id.")
    wave: int = Field(ge=0, le=INT32_MAX, description="Wave number.")
    succeeded: tuple[NodeId, ...] = Field(
        max_length=MAX_NODES, description="Nodes that reached the target."
    )
    failed: tuple[NodeId, ...] = Field(max_length=MAX_NODES, description="Nodes that did not.")


class PinChanged(EventData):
    """Which golden stack a scope is now meant to run."""

    event_type: ClassVar[str] = "pin.changed"
    schema_version: ClassVar[int] = 1

    site: SiteId = Field(description="Site the pin applies to.")
    scope: ScopeSelector = Field(description="Nodes the pin applies to within the site.")
    stack_hash: StackHash = Field(description="The pinned golden stack.")
    stack: dict[Name, ProfileStack] = Field(
        max_length=MAX_ITEMS, description="Per hardware profile, component -> exact version."
    )
    rollout_id: RolloutId | None = Field(default=None, description="Rollout that moved the pin.")
    previous_stack_hash: StackHash | None = Field(default=None, description="The pin before.")


# --- maintenance windows ----------------------------------------------------------------------


class _MaintenanceWindows(EventData):
    """A pool's or a site's maintenance windows (``lockstep_common.maintenance``)."""

    scope: Literal["pool", "site"] = Field(description="What ``name`` names: a pool or a site.")
    name: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        description="The pool or site, as the fleet file names it."
    )
    timezone: Annotated[str, Field(min_length=1, max_length=64)] = Field(
        default="UTC", description="IANA time zone the windows' wall-clock times are in."
    )
    windows: tuple[Annotated[str, Field(min_length=1, max_length=64)], ...] | None = Field(
        max_length=MAX_SMALL,
        description="Weekly windows, each 'DAYS HH:MM-HH:MM' (e.g. 'sat,sun 22:00-06:00'); "
        "null: no restriction (work may start at any time).",
    )

    @model_validator(mode="after")
    def _usable(self) -> Self:
        # The same check as the CLI's, so a hand-made event is refused at the door too.
        if self.windows is not None:
            try:
                parse_schedule(self.windows, self.timezone)
            except MaintenanceError as exc:
                raise ValueError(str(exc)) from None
        return self


class MaintenanceWindowsRequested(_MaintenanceWindows):
    """An operator sets (or clears) the maintenance windows of a pool or a site
    (``lockstep pool set``); the planner records it and answers with ``maintenance.changed``."""

    event_type: ClassVar[str] = "maintenance.requested"
    schema_version: ClassVar[int] = 1

    requested_by: Name = Field(description="Who asks (the operator's name).")


class MaintenanceWindowsChanged(_MaintenanceWindows):
    """The maintenance windows the planner now holds for a pool or a site: it plans outages
    inside them, and the updater starts no node's work outside them."""

    event_type: ClassVar[str] = "maintenance.changed"
    schema_version: ClassVar[int] = 1

    set_by: Name = Field(description="Who set them.")
    set_at: AwareDatetime = Field(description="When the planner recorded them; later wins.")


# --- device steps -----------------------------------------------------------------------------


class _DeviceEvent(EventData):
    rollout_id: RolloutId = Field(description="Rollout id.")
    node_id: NodeId = Field(description="Node id.")
    component: Component = Field(description="Component acted on.")
    from_version: Version | None = Field(default=None, description="Version before the step.")
    to_version: Version = Field(description="Target version.")
    duration_s: float | None = Field(default=None, ge=0, description="How long the step took.")


class DeviceStaged(_DeviceEvent):
    """An image was copied to a device without disturbing it."""

    event_type: ClassVar[str] = "device.staged"
    schema_version: ClassVar[int] = 1


class DeviceActivated(_DeviceEvent):
    """A device switched to the new image across a reset."""

    event_type: ClassVar[str] = "device.activated"
    schema_version: ClassVar[int] = 1


class DeviceVerified(_DeviceEvent):
    """The re-read version equals the target."""

    event_type: ClassVar[str] = "device.verified"
    schema_version: ClassVar[int] = 1


class DeviceFailed(_DeviceEvent):
    """A step failed."""

    event_type: ClassVar[str] = "device.failed"
    schema_version: ClassVar[int] = 1

    step: Name = Field(description="The step that failed (drain, stage, activate, verify, ...).")
    reason: Text = Field(description="What went wrong.")


class DeviceRolledBack(_DeviceEvent):
    """An A/B device put back on its previous version (its other bank, or a re-flash)."""

    event_type: ClassVar[str] = "device.rolled_back"
    schema_version: ClassVar[int] = 1

    reason: Text = Field(description="Why it was rolled back.")
    mechanism: RollbackMechanism | None = Field(
        default=None,
        description="How the previous version was put back (None: not recorded, an event from "
        "before the field).",
    )


# --- health gate ------------------------------------------------------------------------------


class MetricEvidence(Part):
    """One metric compared between updated nodes and the control group."""

    metric: Name = Field(description="e.g. nccl_busbw_ratio, xid_79, dcgm_diag.")
    treatment: float | None = Field(description="Median over updated nodes (None: no data).")
    control: float | None = Field(description="Median over the control group (None: no data).")
    p_value: float | None = Field(default=None, ge=0, le=1, description="Test p-value, if any.")
    passed: bool = Field(description="Whether this metric alone passes.")
    detail: Text = Field(default="", description="Rule or test applied.")


class _GateEvent(EventData):
    rollout_id: RolloutId = Field(description="Rollout id.")
    wave: int = Field(ge=0, le=INT32_MAX, description="Wave gated.")
    verdict: GateVerdict = Field(description="passed, tripped or inconclusive.")
    evidence: tuple[MetricEvidence, ...] = Field(
        max_length=MAX_ITEMS, description="Per-metric evidence."
    )
    offending_nodes: tuple[NodeId, ...] = Field(
        default=(), max_length=MAX_NODES, description="Nodes that failed."
    )


class GatePassed(_GateEvent):
    """The wave is healthy: the next may be released."""

    event_type: ClassVar[str] = "gate.passed"
    schema_version: ClassVar[int] = 1


class GateTripped(_GateEvent):
    """The wave is unhealthy: the rollout must halt."""

    event_type: ClassVar[str] = "gate.tripped"
    schema_version: ClassVar[int] = 1


class GateInconclusive(_GateEvent):
    """Not enough evidence either way: hold."""

    event_type: ClassVar[str] = "gate.inconclusive"
    schema_version: ClassVar[int] = 1


# --- telemetry --------------------------------------------------------------------------------


class InventoryObserved(EventData):
    """A version tuple read from a node (BMC sweep or in-band agent)."""

    event_type: ClassVar[str] = "telemetry.observed.inventory"
    schema_version: ClassVar[int] = 1

    node_id: NodeId = Field(description="Node id.")
    site: SiteId = Field(description="Site of the node.")
    source: ObservationSource = Field(description="redfish or agent.")
    observed_at: AwareDatetime = Field(description="When it was read.")
    sequence: int = Field(
        ge=0, le=INT64_MAX, description="Per-node, per-source report counter (orders reports)."
    )
    components: dict[Component, Version] = Field(description="Lockstep component -> version.")
    members: dict[Name, Version] = Field(
        default_factory=dict,
        max_length=MAX_ITEMS,
        description="Raw inventory member id -> version, unknown ones too.",
    )
    firmware_dirs: tuple[Version, ...] = Field(
        default=(),
        max_length=MAX_SMALL,
        description="Versions under /lib/firmware/nvidia present on the node.",
    )
    loaded_module_version: Version | None = Field(
        default=None, description="Version of the loaded nvidia kernel module."
    )


class HealthObserved(EventData):
    """One health report from a node agent or DCGM."""

    event_type: ClassVar[str] = "telemetry.observed.health"
    schema_version: ClassVar[int] = 1

    node_id: NodeId = Field(description="Node id.")
    site: SiteId = Field(description="Site of the node.")
    observed_at: AwareDatetime = Field(description="When it was measured.")
    dcgm_level: int | None = Field(default=None, ge=1, le=4, description="DCGM diag level run.")
    dcgm_passed: bool | None = Field(default=None, description="DCGM diag result.")
    xid_counts: dict[
        Annotated[str, Field(pattern=r"^[0-9]{1,4}$")], Annotated[int, Field(ge=0, le=INT32_MAX)]
    ] = Field(
        default_factory=dict,
        max_length=MAX_ITEMS,
        description="XID code -> count since the last report.",
    )
    nccl_busbw_gbps: float | None = Field(default=None, ge=0, description="all_reduce busbw.")
    nccl_expected_gbps: float | None = Field(default=None, gt=0, description="Expected busbw.")
    sm_clock_mhz: float | None = Field(default=None, ge=0, description="Median SM clock.")
    throttle_reasons: tuple[Name, ...] = Field(
        default=(), max_length=MAX_SMALL, description="Active throttle reasons."
    )
    max_temperature_c: float | None = Field(default=None, description="Hottest GPU.")
    heartbeat: int | None = Field(
        default=None,
        ge=0,
        le=INT64_MAX,
        description="The agent's report counter since it started: a gap or a reset is evidence.",
    )
    gpu_power_w: float | None = Field(default=None, ge=0, description="Board power (W).")
    ecc_sbe_count: int | None = Field(
        default=None, ge=0, le=INT32_MAX, description="Corrected ECC errors since the last report."
    )
    row_remap_pending: int | None = Field(
        default=None, ge=0, le=INT32_MAX, description="Pending row remappings (reset needed)."
    )
    pcie_replay_count: int | None = Field(
        default=None, ge=0, le=INT32_MAX, description="PCIe replays since the last report."
    )
    nvlink_crc_error_count: int | None = Field(
        default=None, ge=0, le=INT32_MAX, description="NVLink CRC errors since the last report."
    )
    gsp_init_failed: bool | None = Field(
        default=None, description="True when the GSP firmware failed to initialise."
    )


# --- drift ------------------------------------------------------------------------------------


class DriftItem(Part):
    """One component that differs from the pin or breaks a compatibility rule."""

    component: Component = Field(description="Component concerned.")
    expected: Version | None = Field(description="Pinned version (None: not pinned).")
    actual: Version | None = Field(description="Observed version (None: not observed).")
    kind: DriftKind = Field(description="Kind of drift.")
    severity: Severity = Field(description="How urgent.")
    detail: Text = Field(default="", description="Evidence, e.g. the rule that is broken.")


class DriftDetected(EventData):
    """A node's drift set changed and is not empty."""

    event_type: ClassVar[str] = "drift.detected"
    schema_version: ClassVar[int] = 1

    node_id: NodeId = Field(description="Node id.")
    site: SiteId = Field(description="Site of the node.")
    stack_hash: StackHash | None = Field(description="The node's pin (None: not pinned).")
    items: tuple[DriftItem, ...] = Field(
        min_length=1, max_length=MAX_ITEMS, description="Every drifted component."
    )


class DriftResolved(EventData):
    """A node that had drift now conforms."""

    event_type: ClassVar[str] = "drift.resolved"
    schema_version: ClassVar[int] = 1

    node_id: NodeId = Field(description="Node id.")
    site: SiteId = Field(description="Site of the node.")
    stack_hash: StackHash | None = Field(description="The node's pin.")


# --- admission (request/reply, core NATS) -----------------------------------------------------


class Straggler(Part):
    """One node whose health is an outlier against its peers of the same profile."""

    node_id: NodeId = Field(description="Node id.")
    site: SiteId = Field(description="Site of the node.")
    metric: Name = Field(description="The signal, e.g. nccl_busbw_gbps or sm_clock_mhz.")
    value: float = Field(description="The node's median over the window.")
    peer_median: float = Field(description="The median of its profile's nodes.")
    deviations: float = Field(
        ge=0, description="How far below the peers, in robust standard deviations (scaled MAD)."
    )


class SharedVersion(Part):
    """A component version the stragglers share and their healthy peers mostly do not."""

    component: Component = Field(description="Component.")
    version: Version = Field(description="The version the stragglers share.")
    stragglers_with: int = Field(ge=0, le=MAX_NODES, description="Stragglers running it.")
    stragglers: int = Field(ge=1, le=MAX_NODES, description="Stragglers of the profile.")
    peers_with: int = Field(ge=0, le=MAX_NODES, description="Healthy peers running it.")
    peers: int = Field(ge=0, le=MAX_NODES, description="Healthy peers of the profile.")
    p_value: float = Field(
        ge=0, le=1, description="Fisher's exact test, one-sided: the association by chance."
    )


class StragglersFlagged(EventData):
    """The stragglers of one hardware profile changed (seed 000's "silent slow node"): nodes
    whose busbw or clocks are outliers against their peers, outside any rollout, and the
    component versions they share that their healthy peers do not. An empty ``stragglers``
    says the profile has none left."""

    event_type: ClassVar[str] = "drift.stragglers"
    schema_version: ClassVar[int] = 1

    profile: Name = Field(description="Hardware profile whose nodes were compared.")
    evaluated_at: AwareDatetime = Field(description="When the window ended.")
    window_s: int = Field(gt=0, le=INT32_MAX, description="Length of the window judged.")
    nodes: int = Field(ge=0, le=MAX_NODES, description="Nodes of the profile with samples.")
    stragglers: tuple[Straggler, ...] = Field(
        max_length=MAX_ITEMS, description="Every straggler, worst first."
    )
    shared_versions: tuple[SharedVersion, ...] = Field(
        default=(), max_length=MAX_SMALL, description="Versions the stragglers share."
    )


class AdmissionCheckRequested(EventData):
    """A scheduler asks whether a job's nodes run the job's stack."""

    event_type: ClassVar[str] = "admission.check.requested"
    schema_version: ClassVar[int] = 1

    stack_hash: StackHash = Field(description="The job's required stack.")
    node_ids: tuple[NodeId, ...] = Field(
        min_length=1, max_length=MAX_NODES, description="Nodes allocated to the job."
    )


class NodeAdmission(Part):
    """Whether one node may run the job, and why not."""

    node_id: NodeId = Field(description="Node id.")
    admitted: bool = Field(description="True when the node conforms.")
    reasons: tuple[Text, ...] = Field(
        default=(), max_length=MAX_SMALL, description="Why not, one line per reason."
    )


class AdmissionCheckAnswered(EventData):
    """Inventory's answer to an admission check."""

    event_type: ClassVar[str] = "admission.check.answered"
    schema_version: ClassVar[int] = 1

    stack_hash: StackHash = Field(description="The stack asked about.")
    nodes: tuple[NodeAdmission, ...] = Field(
        max_length=MAX_NODES, description="One entry per node asked about."
    )


# --- fleet query (request/reply) ----------------------------------------------------------------

MAX_FLEET_PAGE = 500  # nodes per answer: a page stays well under NATS's 1 MiB default payload


class FleetQueryRequested(EventData):
    """Ask the inventory for registered nodes, one page at a time, in node id order."""

    event_type: ClassVar[str] = "fleet.query.requested"
    schema_version: ClassVar[int] = 1

    scope: ScopeSelector | None = Field(default=None, description="Only these nodes (None: all).")
    after: NodeId | None = Field(
        default=None, description="Cursor: only nodes whose id sorts after this one."
    )
    limit: int = Field(default=250, ge=1, le=MAX_FLEET_PAGE, description="Nodes per page.")


class FleetNode(Part):
    """One registered node as the inventory knows it: where it is, how to reach its BMC (the
    credentials by reference, never a secret), what was last observed and why it drifts."""

    node_id: NodeId = Field(description="Node id.")
    site: SiteId = Field(description="Site.")
    profile: Name = Field(description="Hardware profile (SKU).")
    supplier: Annotated[str, Field(max_length=128)] = Field(default="", description="Builder.")
    rack: Annotated[str, Field(max_length=128)] = Field(default="", description="Rack.")
    pool: Annotated[str, Field(max_length=128)] = Field(default="", description="Pool.")
    fabric_domain: Annotated[str, Field(max_length=128)] = Field(
        default="", description="NVLink domain."
    )
    power_side: Annotated[str, Field(max_length=32)] = Field(
        default="", description="Redundant power side (e.g. A or B)."
    )
    bmc_url: Annotated[str, Field(min_length=1, max_length=2048)] = Field(
        description="BMC base URL."
    )
    allow_plain_http: bool = Field(default=False, description="May credentials go over http.")
    credentials: Annotated[str, Field(pattern=r"^(env:|file:/)", max_length=1024)] = Field(
        description="Where the BMC credentials are (env:PREFIX or file:/path), not them."
    )
    readable: bool | None = Field(
        default=None, description="Whether the BMC answered the last sweep (None: not swept)."
    )
    observed: dict[Component, Version] = Field(
        default_factory=dict, max_length=MAX_SMALL, description="Last observed versions."
    )
    conflicts: dict[Component, Annotated[dict[Name, Version], Field(max_length=MAX_SMALL)]] = Field(
        default_factory=dict,
        max_length=MAX_SMALL,
        description="Components whose members run different versions (member id -> "
        "version), e.g. a GB200 tray's two NIC families; absent from ``observed``.",
    )
    drift: tuple[DriftItem, ...] = Field(
        default=(), max_length=MAX_ITEMS, description="Current drift items."
    )
    version: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="The registry entry's version: greater after any change to it (0: an "
        "inventory that does not count them); a cached copy of an older version is re-read.",
    )


class FleetQueryAnswered(EventData):
    """One page of registered nodes."""

    event_type: ClassVar[str] = "fleet.query.answered"
    schema_version: ClassVar[int] = 1

    nodes: tuple[FleetNode, ...] = Field(
        max_length=MAX_FLEET_PAGE, description="This page, in node id order."
    )
    next_after: NodeId | None = Field(
        default=None, description="Ask again with after= this for the next page (None: done)."
    )


class NodeVersion(Part):
    """A registry entry's version (``FleetNode.version``), without its facts."""

    node_id: NodeId = Field(description="Node id.")
    version: Annotated[int, Field(ge=1)] = Field(
        description="The entry's version now (for a removed node: drawn at its removal)."
    )


class FleetChanged(EventData):
    """Registry entries the inventory changed (imported anew, or removed): a copy of one older
    than its version is to be read again (``fleet.query``). It carries no facts, so the worst a
    repeated or stray one can do is cost a read; announced on core NATS as the change commits,
    to every updater process (its wave snapshot, ``lockstep_updater.adapters.wave_facts``)."""

    event_type: ClassVar[str] = "fleet.changed"
    schema_version: ClassVar[int] = 1

    nodes: tuple[NodeVersion, ...] = Field(
        min_length=1, max_length=MAX_FLEET_PAGE, description="The entries changed, by node."
    )


# --- in-band commands (request/reply on agent.command.<site>.<node>) ---------------------------
# The updater asks one node's agent to act on the node; only the updater may publish these
# subjects and only that node's agent may hear them (``bus_access``). The agent runs a command
# at most once per id, for the work item holding the highest fencing token, and installs only
# the package whose SHA-256 the attested bundle names (``lockstep_agent.commands``).

AGENT_PACKAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9.+_:~-]{0,127}$"  # Debian policy 5.6.1/5.6.12, RPM
AGENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$"


class NodeCommandRequested(EventData):
    """One command for one node's agent: install the driver package, rebuild DKMS, reboot, or
    read the node's in-band state (``read-state``: changes nothing, is neither journaled nor
    fenced)."""

    event_type: ClassVar[str] = "node.command.requested"
    schema_version: ClassVar[int] = 1

    site: SiteId = Field(description="Site of the node (its subject's).")
    node_id: NodeId = Field(description="The node whose agent runs it (its subject's).")
    command_id: str = Field(
        pattern=AGENT_ID_PATTERN, description="Once per id: a repeat is answered, not run."
    )
    action: Literal["install-driver", "rebuild-dkms", "reboot", "read-state"]
    work_item: str = Field(pattern=AGENT_ID_PATTERN, description="The updater's work item.")
    fencing_token: int = Field(
        ge=0, le=INT64_MAX, description="The work item's lease token; a lower one is refused."
    )
    package: str | None = Field(default=None, pattern=AGENT_PACKAGE_PATTERN)
    version: str | None = Field(default=None, pattern=AGENT_PACKAGE_PATTERN)
    package_sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$", description="The attested package's digest."
    )


class NodeReading(Part):
    """What the agent reads of the node's in-band software (the updater's ``AgentState``)."""

    phase: Annotated[str, Field(pattern=r"^[a-z_]{1,32}$")] = Field(
        description="ready, driver_installed, dkms_built, dkms_failed, rebooting, "
        "gsp_mismatch or module_rejected."
    )
    driver: Version = Field(description="Installed driver package version.")
    loaded_module: Version | None = Field(
        default=None, description="/sys/module/nvidia/version; None: no module loaded."
    )
    gsp_firmware: Version | None = Field(default=None, description="GSP firmware NVML reads.")
    firmware_dirs: tuple[Version, ...] = Field(
        default=(), max_length=MAX_SMALL, description="Versions under /lib/firmware/nvidia/."
    )
    dkms: Annotated[str, Field(max_length=64)] = Field(description="DKMS build state.")
    cuda: Version = Field(description="CUDA user space.")
    nccl: Version = Field(description="NCCL.")
    fabric_manager: Version | None = Field(default=None, description="Fabric manager.")
    module_rejected: bool = Field(
        default=False, description="Secure Boot refused the module at the last boot."
    )
    diag_passed: bool = Field(default=False, description="dcgmi diag -r 1 passes.")


class NodeCommandAnswered(EventData):
    """What became of a command on the node."""

    event_type: ClassVar[str] = "node.command.answered"
    schema_version: ClassVar[int] = 1

    command_id: str
    status: Literal["done", "failed", "refused", "interrupted", "dry-run"]
    detail: str = Field(default="", max_length=4096)
    ran: tuple[tuple[str, ...], ...] = Field(
        default=(), max_length=16, description="The programs run (a dry run: would be)."
    )
    state: NodeReading | None = Field(
        default=None, description="The node's in-band state (the answer to read-state)."
    )


# --- operator commands (request/reply on ops.<identity>.<service>.<command>) --------------------
# The operator CLI asks the service that owns the data; it holds no database credentials
# (issue 26, item 3). Who asked is the subject's identity token, which the server allows each
# identity only for itself; a command that cannot be run gets an ``ops.refused`` reply instead
# of the command's answer. Lists come a page at a time so that every reply stays under NATS's
# 1 MiB default payload.

MAX_OPS_PAGE = 500  # registered nodes per page (about 300 bytes each)
MAX_DRIFT_PAGE = 100  # drifted nodes per page (each up to a few dozen items)
MAX_HISTORY = 200
Reading = Annotated[str, Field(max_length=1024)]  # a version or member id as a BMC reported it
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]


class OpsRefused(EventData):
    """An operator command that was not run, and why. Nothing was changed."""

    event_type: ClassVar[str] = "ops.refused"
    schema_version: ClassVar[int] = 1

    command: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        description="The command asked, e.g. fleet.remove."
    )
    kind: Annotated[str, Field(pattern=r"^(forbidden|invalid|not_found|conflict|failed)$")] = Field(
        description="forbidden (this identity may not), invalid (bad request), not_found, "
        "conflict (not now, in this state), failed (the service could not answer; asking "
        "again may work)."
    )
    reason: Text = Field(description="One line naming what is wrong.")


class RegisteredNode(Part):
    """One node's registry entry (the credentials by reference, never a secret)."""

    id: NodeId = Field(description="Node id.")
    bmc_url: Annotated[str, Field(min_length=1, max_length=2048)] = Field(
        description="BMC base URL."
    )
    profile: Name = Field(description="Hardware profile (SKU).")
    supplier: Annotated[str, Field(max_length=128)] = Field(default="", description="Builder.")
    site: SiteId = Field(description="Site.")
    rack: Annotated[str, Field(max_length=128)] = Field(default="", description="Rack.")
    fabric_domain: Annotated[str, Field(max_length=128)] = Field(
        default="", description="NVLink domain."
    )
    pool: Annotated[str, Field(max_length=128)] = Field(default="", description="Pool.")
    credentials: Annotated[str, Field(pattern=r"^(env:|file:/)", max_length=1024)] = Field(
        description="Where the BMC credentials are (env:PREFIX or file:/path), not them."
    )
    power_side: Annotated[str, Field(max_length=32)] = Field(
        default="", description="Redundant power side."
    )
    allow_plain_http: bool = Field(default=False, description="May credentials go over http.")


class FleetListRequested(EventData):
    """``lockstep fleet list``: registered nodes, a page at a time, in node id order."""

    event_type: ClassVar[str] = "ops.fleet.list.requested"
    schema_version: ClassVar[int] = 1

    after: NodeId | None = Field(default=None, description="Only nodes sorting after this id.")
    limit: int = Field(default=MAX_OPS_PAGE, ge=1, le=MAX_OPS_PAGE, description="Page size.")


class FleetListAnswered(EventData):
    """One page of the registry."""

    event_type: ClassVar[str] = "ops.fleet.list.answered"
    schema_version: ClassVar[int] = 1

    nodes: tuple[RegisteredNode, ...] = Field(max_length=MAX_OPS_PAGE, description="This page.")
    next_after: NodeId | None = Field(
        default=None, description="Ask again with after= this for the next page (None: done)."
    )


class Conformance(Part):
    """Conformance counts of a group of nodes."""

    nodes: Count = Field(description="Registered nodes.")
    conforming: Count = Field(description="Observed, readable, no drift but informational.")
    drifted: Count = Field(description="Nodes with drift beyond informational items.")
    unreadable: Count = Field(description="Nodes whose BMC did not answer the last sweep.")
    unobserved: Count = Field(description="Nodes never evaluated.")
    conformance_ratio: float = Field(ge=0, le=1, description="conforming / nodes (1 if none).")


class PoolConformance(Conformance):
    """Conformance of one (pool, profile) group."""

    pool: Annotated[str, Field(max_length=128)] = Field(description="Pool.")
    profile: Name = Field(description="Hardware profile.")


class SweepState(Part):
    """One Redfish sweep of the fleet."""

    id: Annotated[int, Field(ge=0, le=INT64_MAX)] = Field(description="Sweep number.")
    started_at: AwareDatetime = Field(description="When it started.")
    finished_at: AwareDatetime | None = Field(description="When it finished (None: not yet).")
    seconds: float | None = Field(ge=0, description="How long it took (None: unfinished).")
    total: Count = Field(description="Nodes to sweep.")
    done: Count = Field(description="Nodes read and committed.")
    unreadable: Count = Field(description="Nodes whose BMC did not answer.")
    error: Text | None = Field(default=None, description="Why it ended early, if it did.")


class FleetStatusRequested(EventData):
    """``lockstep fleet status``: the fleet at a glance."""

    event_type: ClassVar[str] = "ops.fleet.status.requested"
    schema_version: ClassVar[int] = 1


class FleetStatusAnswered(EventData):
    """Conformance by pool and profile, drifted nodes by kind, the newest sweeps."""

    event_type: ClassVar[str] = "ops.fleet.status.answered"
    schema_version: ClassVar[int] = 1

    fleet: Conformance = Field(description="The whole fleet.")
    groups: tuple[PoolConformance, ...] = Field(
        max_length=MAX_NODES, description="One per (pool, profile), sorted."
    )
    drifted_by_kind: dict[DriftKind, Count] = Field(
        max_length=MAX_SMALL, description="Drifted nodes per drift kind."
    )
    sweep: SweepState | None = Field(description="The newest sweep.")
    sweep_running: bool = Field(description="The newest sweep is unfinished and running.")
    last_finished_sweep: SweepState | None = Field(description="The newest finished sweep.")


class NodeObservation(Part):
    """A node's latest report from one source."""

    source: ObservationSource = Field(description="redfish (the BMC) or agent (in-band).")
    readable: bool = Field(description="Whether the source could be read.")
    error: Text | None = Field(default=None, description="Why not.")
    unreadable_since: AwareDatetime | None = Field(
        default=None, description="First failed read of the current run of failures."
    )
    observed_at: AwareDatetime = Field(description="When it was observed.")
    sequence: Annotated[int, Field(ge=0, le=INT64_MAX)] = Field(description="Report sequence.")
    components: dict[Component, Reading] = Field(
        default_factory=dict, max_length=MAX_SMALL, description="Version per component."
    )
    conflicts: dict[Component, dict[Reading, Reading]] = Field(
        default_factory=dict,
        max_length=MAX_SMALL,
        description="Components whose members disagree: member -> version.",
    )
    members: dict[Reading, Reading] = Field(
        default_factory=dict, max_length=MAX_ITEMS, description="Inventory member -> version."
    )
    loaded_module: Reading | None = Field(default=None, description="Loaded driver module.")
    firmware_dirs: tuple[Reading, ...] | None = Field(
        default=None, max_length=MAX_ITEMS, description="Firmware directories present."
    )


class HistoryEntry(Part):
    """One observed change of one item."""

    source: ObservationSource = Field(description="Who observed it.")
    item: Reading = Field(description="Component or member.")
    old: Reading | None = Field(description="Version before (None: new).")
    new: Reading | None = Field(description="Version after (None: gone).")
    observed_at: AwareDatetime = Field(description="When.")


class DriftState(Part):
    """A node's current drift set."""

    stack_hash: StackHash | None = Field(description="The pin judged against (None: none).")
    since: AwareDatetime = Field(description="Drifting since.")
    evaluated_at: AwareDatetime = Field(description="Last evaluated.")
    items: tuple[DriftItem, ...] = Field(max_length=MAX_ITEMS, description="Drift items.")


class FleetShowRequested(EventData):
    """``lockstep fleet show NODE``."""

    event_type: ClassVar[str] = "ops.fleet.show.requested"
    schema_version: ClassVar[int] = 1

    node_id: NodeId = Field(description="The node.")


class FleetShowAnswered(EventData):
    """Everything the inventory knows about one node."""

    event_type: ClassVar[str] = "ops.fleet.show.answered"
    schema_version: ClassVar[int] = 1

    node: RegisteredNode = Field(description="Registry entry.")
    observations: tuple[NodeObservation, ...] = Field(
        max_length=MAX_SMALL, description="Latest report per source."
    )
    pin_stack_hash: StackHash | None = Field(description="The pin that applies (None: none).")
    drift: DriftState | None = Field(description="Drift set (None: not evaluated yet).")
    history: tuple[HistoryEntry, ...] = Field(
        max_length=MAX_HISTORY, description="Recent changes, newest first."
    )


class DriftedNode(Part):
    """One drifted node of the drift report."""

    node: NodeId = Field(description="Node id.")
    site: SiteId = Field(description="Site.")
    pool: Annotated[str, Field(max_length=128)] = Field(description="Pool.")
    profile: Name = Field(description="Hardware profile.")
    stack_hash: StackHash | None = Field(description="The pin judged against.")
    since: AwareDatetime = Field(description="Drifting since.")
    items: tuple[DriftItem, ...] = Field(max_length=MAX_ITEMS, description="Drift items.")


class FleetDriftRequested(EventData):
    """``lockstep fleet drift``: drifted nodes, a page at a time, in node id order."""

    event_type: ClassVar[str] = "ops.fleet.drift.requested"
    schema_version: ClassVar[int] = 1

    include_informational: bool = Field(
        default=False, description="Also nodes whose only items are informational (unknown)."
    )
    after: NodeId | None = Field(default=None, description="Only nodes sorting after this id.")
    limit: int = Field(default=MAX_DRIFT_PAGE, ge=1, le=MAX_DRIFT_PAGE, description="Page size.")


class FleetDriftAnswered(EventData):
    """One page of the drift report."""

    event_type: ClassVar[str] = "ops.fleet.drift.answered"
    schema_version: ClassVar[int] = 1

    nodes: tuple[DriftedNode, ...] = Field(max_length=MAX_DRIFT_PAGE, description="This page.")
    next_after: NodeId | None = Field(
        default=None, description="Ask again with after= this for the next page (None: done)."
    )


class FleetRemoveRequested(EventData):
    """``lockstep fleet remove NODE...``: forget nodes, all or none."""

    event_type: ClassVar[str] = "ops.fleet.remove.requested"
    schema_version: ClassVar[int] = 1

    node_ids: tuple[NodeId, ...] = Field(
        min_length=1, max_length=MAX_NODES, description="Nodes to forget."
    )


class FleetRemoveAnswered(EventData):
    """The nodes forgotten."""

    event_type: ClassVar[str] = "ops.fleet.remove.answered"
    schema_version: ClassVar[int] = 1

    removed: tuple[NodeId, ...] = Field(max_length=MAX_NODES, description="Nodes forgotten.")


MAX_IMPORT_CHUNKS = 10_000


class FleetImportRequested(EventData):
    """``lockstep fleet import``: one chunk of a fleet file (a whole file of 12,500 nodes does
    not fit one message). The inventory stages each chunk, validated on arrival, and adds or
    updates every node of the import in one transaction when its last chunk arrives: all or
    nothing."""

    event_type: ClassVar[str] = "ops.fleet.import.requested"
    schema_version: ClassVar[int] = 1

    import_id: uuid.UUID = Field(description="The import this chunk belongs to.")
    chunk: Annotated[int, Field(ge=0, lt=MAX_IMPORT_CHUNKS)] = Field(
        description="This chunk's number, from 0."
    )
    chunks: Annotated[int, Field(ge=1, le=MAX_IMPORT_CHUNKS)] = Field(
        description="How many chunks the import has."
    )
    first_index: Annotated[int, Field(ge=0, le=MAX_IMPORT_CHUNKS * MAX_OPS_PAGE)] = Field(
        default=0, description="The file's index of this chunk's first node (to name bad nodes)."
    )
    nodes: tuple[RegisteredNode, ...] = Field(
        min_length=1, max_length=MAX_OPS_PAGE, description="This chunk's nodes."
    )

    @model_validator(mode="after")
    def _chunk_in_range(self) -> Self:
        if self.chunk >= self.chunks:
            raise ValueError(f"chunk {self.chunk} of {self.chunks}: chunks count from 0")
        return self


class FleetImportAnswered(EventData):
    """A chunk staged, or (its last chunk) the import committed and what it changed."""

    event_type: ClassVar[str] = "ops.fleet.import.answered"
    schema_version: ClassVar[int] = 1

    import_id: uuid.UUID = Field(description="The import.")
    staged: Count = Field(description="Chunks of this import received so far.")
    chunks: Annotated[int, Field(ge=1, le=MAX_IMPORT_CHUNKS)] = Field(
        description="Chunks the import has."
    )
    committed: bool = Field(description="Every chunk arrived and the nodes were written.")
    nodes: Count = Field(default=0, description="Nodes the import holds (when committed).")
    added: Count = Field(default=0, description="Nodes new to the registry.")
    updated: Count = Field(default=0, description="Registered nodes whose entry changed.")
    unchanged: Count = Field(default=0, description="Registered nodes already as imported.")


class FleetSweepRequested(EventData):
    """``lockstep fleet sweep``: the inventory reads these BMCs (none named: every registered
    one) now, with its own credentials, and commits what it read like its periodic sweep."""

    event_type: ClassVar[str] = "ops.fleet.sweep.requested"
    schema_version: ClassVar[int] = 1

    node_ids: tuple[NodeId, ...] = Field(
        default=(), max_length=MAX_NODES, description="Nodes to sweep (empty: all)."
    )


class FleetSweepAnswered(EventData):
    """The sweep carried out (each node's outcome: ``fleet.swept``)."""

    event_type: ClassVar[str] = "ops.fleet.sweep.answered"
    schema_version: ClassVar[int] = 1

    sweep: SweepState | None = Field(
        description="The sweep (None: accepted, but it did not finish; see the service's log)."
    )
    drift_detected: Count = Field(default=0, description="Nodes whose drift it detected.")
    drift_resolved: Count = Field(default=0, description="Nodes whose drift it resolved.")


class SweptNode(Part):
    """One node's outcome of a sweep."""

    id: NodeId = Field(description="Node id.")
    readable: bool = Field(description="Whether its BMC was read.")
    error: Text | None = Field(default=None, description="Why not.")
    components: dict[Component, Reading] = Field(
        default_factory=dict,
        max_length=MAX_SMALL,
        description="Version per component (members that disagree: their versions, a|b).",
    )
    members: dict[Reading, Reading] = Field(
        default_factory=dict, max_length=MAX_ITEMS, description="Inventory member -> version."
    )


class FleetSweptRequested(EventData):
    """Each node's outcome of a sweep, a page at a time, in node id order (a node swept again
    since shows in the newer sweep only)."""

    event_type: ClassVar[str] = "ops.fleet.swept.requested"
    schema_version: ClassVar[int] = 1

    sweep_id: Annotated[int, Field(ge=0, le=INT64_MAX)] = Field(description="The sweep.")
    after: NodeId | None = Field(default=None, description="Only nodes sorting after this id.")
    limit: int = Field(default=MAX_DRIFT_PAGE, ge=1, le=MAX_DRIFT_PAGE, description="Page size.")


class FleetSweptAnswered(EventData):
    """One page of a sweep's node outcomes."""

    event_type: ClassVar[str] = "ops.fleet.swept.answered"
    schema_version: ClassVar[int] = 1

    nodes: tuple[SweptNode, ...] = Field(max_length=MAX_DRIFT_PAGE, description="This page.")
    next_after: NodeId | None = Field(
        default=None, description="Ask again with after= this for the next page (None: done)."
    )


# Every service answers these about its own dead letters (``lockstep dlq``).
MAX_DLQ_PAGE = 200
MAX_PAYLOAD_TEXT = 1 << 20  # a dead letter's original, as text or base64 (a NATS message's size)


class DeadLetterEntry(Part):
    """One message a service gave up on, and why."""

    id: Annotated[int, Field(ge=1, le=INT64_MAX)] = Field(description="Its id in the service.")
    failed_at: AwareDatetime = Field(description="When it was given up on.")
    consumer: Name = Field(description="The durable consumer that gave up on it.")
    stream: Name = Field(description="The original's stream.")
    stream_seq: Annotated[int, Field(ge=0, le=INT64_MAX)] = Field(
        description="The original's sequence in its stream."
    )
    subject: Annotated[str, Field(min_length=1, max_length=1024)] = Field(
        description="The original's subject, without the namespace."
    )
    error_kind: Name = Field(description="Error class, e.g. InvalidMessage.")
    deliveries: Count = Field(description="How many times it was delivered.")
    reason: Annotated[str, Field(max_length=65536)] = Field(description="Why.")


class DlqListRequested(EventData):
    """``lockstep dlq list SERVICE``: the newest dead letters of the service asked."""

    event_type: ClassVar[str] = "ops.dlq.list.requested"
    schema_version: ClassVar[int] = 1

    limit: int = Field(default=50, ge=1, le=MAX_DLQ_PAGE, description="At most this many.")


class DlqListAnswered(EventData):
    """Dead letters, newest first."""

    event_type: ClassVar[str] = "ops.dlq.list.answered"
    schema_version: ClassVar[int] = 1

    letters: tuple[DeadLetterEntry, ...] = Field(
        max_length=MAX_DLQ_PAGE, description="Newest first."
    )


class DlqShowRequested(EventData):
    """``lockstep dlq show SERVICE ID`` (and ``replay``, which reads it first)."""

    event_type: ClassVar[str] = "ops.dlq.show.requested"
    schema_version: ClassVar[int] = 1

    id: Annotated[int, Field(ge=1, le=INT64_MAX)] = Field(description="The dead letter.")


class DlqShowAnswered(EventData):
    """One dead letter with its original message."""

    event_type: ClassVar[str] = "ops.dlq.show.answered"
    schema_version: ClassVar[int] = 1

    letter: DeadLetterEntry = Field(description="The dead letter.")
    payload: Annotated[str, Field(max_length=MAX_PAYLOAD_TEXT)] | None = Field(
        default=None, description="The original, when it is UTF-8 text."
    )
    payload_base64: Annotated[str, Field(max_length=MAX_PAYLOAD_TEXT)] | None = Field(
        default=None, description="The original in base64, when it is not."
    )


class DlqPurgeRequested(EventData):
    """``lockstep dlq purge SERVICE``: forget dead letters by id or by age (one of the two)."""

    event_type: ClassVar[str] = "ops.dlq.purge.requested"
    schema_version: ClassVar[int] = 1

    ids: tuple[Annotated[int, Field(ge=1, le=INT64_MAX)], ...] = Field(
        default=(), max_length=MAX_NODES, description="These dead letters."
    )
    older_than_s: float | None = Field(
        default=None, ge=0, description="Everything recorded longer ago than this."
    )

    @model_validator(mode="after")
    def _one_of(self) -> DlqPurgeRequested:
        if bool(self.ids) == (self.older_than_s is not None):
            raise ValueError("give ids or older_than_s, not both and not neither")
        return self


class DlqPurgeAnswered(EventData):
    """The dead letters forgotten."""

    event_type: ClassVar[str] = "ops.dlq.purge.answered"
    schema_version: ClassVar[int] = 1

    purged: tuple[Annotated[int, Field(ge=1, le=INT64_MAX)], ...] = Field(
        max_length=MAX_NODES, description="Their ids."
    )


# The attest service's operator commands (``lockstep bundle submit|list|show``).
MAX_BUNDLE_PAGE = 100  # submissions per list answer: each up to ~3 KiB with its reason
JobId = Annotated[int, Field(ge=1, le=INT64_MAX)]
BundleUri = Annotated[str, Field(min_length=1, max_length=2048)]


class BundleSubmitRequested(EventData):
    """``lockstep bundle submit PATH``: verify the bundle at this path (read by the attest
    service from its bundle roots: the images stay where they are)."""

    event_type: ClassVar[str] = "ops.bundle.submit.requested"
    schema_version: ClassVar[int] = 1

    bundle_uri: BundleUri = Field(description="Absolute path or file:// URI of the bundle.")
    note: Text | None = Field(default=None, description="Free-text reason for the submission.")


class BundleSubmitAnswered(EventData):
    """The submission recorded as a job; its verdict follows (``bundle show``)."""

    event_type: ClassVar[str] = "ops.bundle.submit.answered"
    schema_version: ClassVar[int] = 1

    job_id: JobId = Field(description="The submission's id, for bundle show.")
    bundle_uri: BundleUri = Field(description="The bundle, as submitted.")


class BundleSummary(Part):
    """One submission and, once verified, its verdict."""

    job_id: JobId = Field(description="The submission's id.")
    bundle_uri: BundleUri = Field(description="The bundle, as submitted.")
    submitted_by: Name = Field(description="The identity that submitted it.")
    submitted_at: AwareDatetime = Field(description="When.")
    state: Literal["pending", "running", "attested", "rejected"] = Field(
        description="Waiting, being verified, or its verdict."
    )
    bundle_id: Name | None = Field(default=None, description="From the manifest, if it parsed.")
    bundle_version: Name | None = Field(default=None, description="From the manifest.")
    stack_hash: StackHash | None = Field(default=None, description="Golden stack hash.")
    reason: Text | None = Field(default=None, description="A rejection's first failed check.")


class BundleListRequested(EventData):
    """``lockstep bundle list``: submissions, newest first, a page at a time."""

    event_type: ClassVar[str] = "ops.bundle.list.requested"
    schema_version: ClassVar[int] = 1

    before: JobId | None = Field(default=None, description="Only submissions older than this.")
    limit: int = Field(default=MAX_BUNDLE_PAGE, ge=1, le=MAX_BUNDLE_PAGE, description="Page.")


class BundleListAnswered(EventData):
    """One page of submissions, newest first."""

    event_type: ClassVar[str] = "ops.bundle.list.answered"
    schema_version: ClassVar[int] = 1

    bundles: tuple[BundleSummary, ...] = Field(max_length=MAX_BUNDLE_PAGE, description="Page.")
    next_before: JobId | None = Field(
        default=None, description="Ask again with before= this for the next page (None: done)."
    )


class BundleShowRequested(EventData):
    """``lockstep bundle show ID``: one submission with every check of its verdict."""

    event_type: ClassVar[str] = "ops.bundle.show.requested"
    schema_version: ClassVar[int] = 1

    job_id: JobId = Field(description="The submission.")


class BundleShowAnswered(EventData):
    """The submission, and every check with its outcome (none while it waits)."""

    event_type: ClassVar[str] = "ops.bundle.show.answered"
    schema_version: ClassVar[int] = 1

    bundle: BundleSummary = Field(description="The submission.")
    checks: tuple[CheckVerdict, ...] = Field(
        default=(), max_length=MAX_ITEMS, description="Every check, in order."
    )
    reused_from: JobId | None = Field(
        default=None, description="The verdict repeats this submission's (identical bytes)."
    )


# The updater's operator commands (``lockstep node ...``).
MAX_STEPS = 1000  # steps per history answer: each up to ~1 KiB with its reason


class StepEntry(Part):
    """One update step the updater recorded for a node."""

    rollout_id: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        description="Rollout (or release/remedy work item) id."
    )
    wave: Annotated[int, Field(ge=0, le=INT32_MAX)] = Field(description="Wave.")
    step: Annotated[str, Field(min_length=1, max_length=64)] = Field(description="Step.")
    attempt: Count = Field(description="Attempt number.")
    token: Annotated[int, Field(ge=0, le=INT64_MAX)] = Field(description="Fencing token.")
    started_at: AwareDatetime = Field(description="Start.")
    ended_at: AwareDatetime = Field(description="End.")
    outcome: Annotated[str, Field(min_length=1, max_length=64)] = Field(description="Outcome.")
    reason: Text = Field(description="Why it ended so.")


class NodeHistoryRequested(EventData):
    """``lockstep node history NODE``: the node's most recent update steps."""

    event_type: ClassVar[str] = "ops.node.history.requested"
    schema_version: ClassVar[int] = 1

    node_id: NodeId = Field(description="The node.")
    limit: int = Field(default=200, ge=1, le=MAX_STEPS, description="Most recent steps.")


class NodeHistoryAnswered(EventData):
    """The node's steps, oldest first."""

    event_type: ClassVar[str] = "ops.node.history.answered"
    schema_version: ClassVar[int] = 1

    steps: tuple[StepEntry, ...] = Field(max_length=MAX_STEPS, description="Oldest first.")


MAX_QUARANTINED_PAGE = 500


class QuarantinedNode(Part):
    """A node whose latest work item ended quarantined: Lockstep holds its drain."""

    node_id: NodeId = Field(description="The node.")
    rollout_id: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        description="The rollout (or remedy work item) that quarantined it."
    )
    wave: Annotated[int, Field(ge=0, le=INT32_MAX)] = Field(description="Its wave.")
    since: AwareDatetime = Field(description="When it was quarantined.")
    reason: Text = Field(description="Why.")


class NodeQuarantinedRequested(EventData):
    """``lockstep node quarantined``: the quarantined nodes, a page in node id order."""

    event_type: ClassVar[str] = "ops.node.quarantined.requested"
    schema_version: ClassVar[int] = 1

    after: NodeId | None = Field(default=None, description="Start after this node id.")
    limit: int = Field(default=100, ge=1, le=MAX_QUARANTINED_PAGE, description="Nodes in the page.")


class NodeQuarantinedAnswered(EventData):
    """A page of quarantined nodes and the node id the next page starts after."""

    event_type: ClassVar[str] = "ops.node.quarantined.answered"
    schema_version: ClassVar[int] = 1

    nodes: tuple[QuarantinedNode, ...] = Field(
        max_length=MAX_QUARANTINED_PAGE, description="In node id order."
    )
    next_after: NodeId | None = Field(
        default=None, description="Ask again with after=this for the next page (None: last)."
    )


class NodeReleaseRequested(EventData):
    """``lockstep node release NODE --reason TEXT``: give a quarantined node back."""

    event_type: ClassVar[str] = "ops.node.release.requested"
    schema_version: ClassVar[int] = 1

    node_id: NodeId = Field(description="The node.")
    reason: Annotated[str, Field(min_length=1, max_length=500)] = Field(
        description="Why it may serve again (kept in its history)."
    )
    operator: Annotated[str, Field(max_length=64)] = Field(
        default="", description="The person, as they name themselves (not verified)."
    )


class NodeReleaseAnswered(EventData):
    """The release recorded; the updater gives the drain back."""

    event_type: ClassVar[str] = "ops.node.release.answered"
    schema_version: ClassVar[int] = 1

    release_id: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        description="The release's work item."
    )


class NodeApproveRemedyRequested(EventData):
    """``lockstep node approve-remedy NODE``: let a GSP runbook held for approval run."""

    event_type: ClassVar[str] = "ops.node.approve-remedy.requested"
    schema_version: ClassVar[int] = 1

    node_id: NodeId = Field(description="The node.")


class NodeApproveRemedyAnswered(EventData):
    """The remedy released to the updater's workers."""

    event_type: ClassVar[str] = "ops.node.approve-remedy.answered"
    schema_version: ClassVar[int] = 1

    node_id: NodeId = Field(description="The node.")


# The healthgate's operator commands (``lockstep gate show``, ``lockstep fleet stragglers``).
MAX_VERDICTS = 1000


class GateVerdictRecord(Part):
    """A wave's persisted gate verdict and what it was judged on."""

    rollout_id: RolloutId = Field(description="Rollout.")
    wave: Annotated[int, Field(ge=0, le=INT32_MAX)] = Field(description="Wave.")
    verdict: GateVerdict = Field(description="passed, tripped or inconclusive.")
    kind: Annotated[str, Field(min_length=1, max_length=32)] = Field(
        description="hard_rule (at once) or judge (after the soak)."
    )
    reason: Annotated[str, Field(max_length=65536)] = Field(description="Why, in one text.")
    window_start: AwareDatetime = Field(description="Start of the window judged.")
    window_end: AwareDatetime = Field(description="End of the window judged.")
    policy_digest: Annotated[str, Field(max_length=128)] = Field(
        description="sha256 of the policy the judge ran."
    )
    event_id: uuid.UUID = Field(description="The id of the gate event emitted.")
    decision: dict[str, Any] = Field(
        description="The decision with its per-metric evidence and hard-rule findings, as "
        "`lockstep gate evaluate --json` prints it (the healthgate's GateDecision)."
    )


class GateShowRequested(EventData):
    """``lockstep gate show ROLLOUT [--wave N]``."""

    event_type: ClassVar[str] = "ops.gate.show.requested"
    schema_version: ClassVar[int] = 1

    rollout_id: RolloutId = Field(description="Rollout.")
    wave: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = Field(
        default=None, description="Only this wave (None: every wave)."
    )


class GateShowAnswered(EventData):
    """A rollout's gate verdicts, by wave (empty: none yet)."""

    event_type: ClassVar[str] = "ops.gate.show.answered"
    schema_version: ClassVar[int] = 1

    verdicts: tuple[GateVerdictRecord, ...] = Field(max_length=MAX_VERDICTS, description="By wave.")


class FleetStragglersRequested(EventData):
    """``lockstep fleet stragglers``: the healthgate's last straggler finding per profile."""

    event_type: ClassVar[str] = "ops.fleet.stragglers.requested"
    schema_version: ClassVar[int] = 1


class FleetStragglersAnswered(EventData):
    """Each profile's last finding (as ``drift.stragglers`` announced it), by profile."""

    event_type: ClassVar[str] = "ops.fleet.stragglers.answered"
    schema_version: ClassVar[int] = 1

    findings: tuple[StragglersFlagged, ...] = Field(
        max_length=MAX_SMALL, description="One per profile evaluated (empty: not yet run)."
    )


# The planner's operator commands (``lockstep rollout status|audit``).
MAX_WAVES = 1000
MAX_AUDIT = 5000
Label = Annotated[str, Field(max_length=128)]


MAX_SHOWN = 64  # canary and control nodes named per stratum in a summary (the counts are whole)


class PlanStratum(Part):
    """A stratum (profile, supplier, current stack) the canary covers, with its controls."""

    profile: Name = Field(description="Hardware profile.")
    supplier: Annotated[str, Field(max_length=128)] = Field(description="Builder.")
    stack: Annotated[str, Field(max_length=128)] = Field(description="Stack hash it runs now.")
    canary: tuple[NodeId, ...] = Field(
        max_length=MAX_SHOWN, description="Its canary nodes (the first MAX_SHOWN)."
    )
    canary_count: Count = Field(description="All its canary nodes.")
    controls: tuple[NodeId, ...] = Field(
        max_length=MAX_SHOWN, description="Its control nodes, untouched (the first MAX_SHOWN)."
    )
    controls_count: Count = Field(description="All its control nodes.")
    size: Count | None = Field(
        default=None, description="Nodes in the stratum (None: planned before sizes were kept)."
    )


class RolloutWaveState(Part):
    """One wave of a rollout as the planner tracks it."""

    number: Annotated[int, Field(ge=0, le=INT32_MAX)] = Field(description="Wave number.")
    state: Label = Field(description="pending, released, soaking, held, passed, ...")
    nodes: Count = Field(description="Nodes in the wave.")
    components: tuple[Label, ...] = Field(max_length=MAX_SMALL, description="Components.")
    gate_passed: bool = Field(description="Its gate passed.")
    succeeded: Count = Field(description="Nodes done.")
    failed: Count = Field(description="Nodes failed.")
    released_at: AwareDatetime | None = Field(description="When released to the updater.")
    deadline: AwareDatetime | None = Field(description="When it times out.")
    soak_until: AwareDatetime | None = Field(description="End of its soak.")


class RolloutState(Part):
    """A rollout: its state, approvals, waves and nodes by last device step."""

    rollout_id: RolloutId = Field(description="Rollout.")
    intent_id: uuid.UUID = Field(description="The intent it was planned from.")
    stack_hash: StackHash = Field(description="Target stack.")
    change_class: Label = Field(description="Change class.")
    dry_run: bool = Field(description="Planned only.")
    state: Label = Field(description="planned, running, paused, halted, aborted, completed.")
    plan_hash: Annotated[str, Field(max_length=128)] = Field(description="Hash of the plan.")
    approvals: tuple[Label, ...] = Field(max_length=MAX_SMALL, description="Approvers counted.")
    approvals_needed: Count = Field(description="Approvals its class needs.")
    reason: Annotated[str, Field(max_length=65536)] = Field(description="Why, when halted.")
    created_at: AwareDatetime = Field(description="Planned at.")
    updated_at: AwareDatetime = Field(description="Last change.")
    deferred: dict[str, Any] = Field(
        description="Wave number -> the occupied fabric domain it waits for, and why."
    )
    waves: tuple[RolloutWaveState, ...] = Field(max_length=MAX_WAVES, description="Its waves.")
    nodes_by_step: dict[Label, Count] = Field(
        max_length=MAX_ITEMS, description="Nodes by last device step (waiting: none yet)."
    )
    strata: tuple[PlanStratum, ...] = Field(
        default=(),
        max_length=MAX_ITEMS,
        description="The plan's strata with their canary and control nodes, as planned.",
    )


class IntentOutcome(Part):
    """An intent that did not become a rollout, and why."""

    intent_id: uuid.UUID = Field(description="The intent.")
    state: Label = Field(description="Its state, e.g. refused.")
    reasons: tuple[Annotated[str, Field(max_length=65536)], ...] = Field(
        max_length=MAX_ITEMS, description="Why."
    )


class RolloutStatusRequested(EventData):
    """``lockstep rollout status ROLLOUT``."""

    event_type: ClassVar[str] = "ops.rollout.status.requested"
    schema_version: ClassVar[int] = 1

    rollout_id: RolloutId = Field(description="Rollout.")


class RolloutStatusAnswered(EventData):
    """The rollout, or the intent that did not become one."""

    event_type: ClassVar[str] = "ops.rollout.status.answered"
    schema_version: ClassVar[int] = 1

    rollout: RolloutState | None = Field(default=None, description="The rollout.")
    intent: IntentOutcome | None = Field(
        default=None, description="The refused intent of that id, when there is no rollout."
    )


class AuditEntry(Part):
    """One decision about a rollout."""

    at: AwareDatetime = Field(description="When.")
    actor: Annotated[str, Field(max_length=256)] = Field(description="Who.")
    action: Annotated[str, Field(max_length=256)] = Field(description="What.")
    detail: Annotated[str, Field(max_length=65536)] = Field(description="Why.")


class RolloutAuditRequested(EventData):
    """``lockstep rollout audit ROLLOUT``."""

    event_type: ClassVar[str] = "ops.rollout.audit.requested"
    schema_version: ClassVar[int] = 1

    rollout_id: Annotated[str, Field(min_length=1, max_length=200)] = Field(
        description="Rollout id, or fabric:<domain> for a fabric domain's trail."
    )


class RolloutAuditAnswered(EventData):
    """Every decision about the rollout, oldest first."""

    event_type: ClassVar[str] = "ops.rollout.audit.answered"
    schema_version: ClassVar[int] = 1

    entries: tuple[AuditEntry, ...] = Field(max_length=MAX_AUDIT, description="Oldest first.")


# ``lockstep pool show`` (the planner's maintenance windows).
MAX_POOL_HISTORY = 20


class PoolWindows(Part):
    """A pool's or a site's maintenance windows as the planner holds them."""

    scope: Literal["pool", "site"] = Field(description="What ``name`` names: a pool or a site.")
    name: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        description="The pool or site."
    )
    timezone: Annotated[str, Field(min_length=1, max_length=64)] = Field(
        description="IANA time zone of the windows."
    )
    windows: tuple[Annotated[str, Field(min_length=1, max_length=64)], ...] = Field(
        max_length=MAX_SMALL, description="Weekly windows, each 'DAYS HH:MM-HH:MM'."
    )
    set_by: Name = Field(description="Who set them.")
    set_at: AwareDatetime = Field(description="When the planner recorded them.")


class PoolShowRequested(EventData):
    """``lockstep pool show [NAME]``: every pool's and site's windows, or one's with its recent
    audit lines."""

    event_type: ClassVar[str] = "ops.pool.show.requested"
    schema_version: ClassVar[int] = 1

    scope: Literal["pool", "site"] | None = Field(
        default=None, description="With ``name``: the one to show (None: all)."
    )
    name: Annotated[str, Field(min_length=1, max_length=128)] | None = Field(
        default=None, description="The pool or site (None: all)."
    )

    @model_validator(mode="after")
    def _both_or_neither(self) -> Self:
        if (self.scope is None) != (self.name is None):
            raise ValueError("scope and name go together")
        return self


class PoolShowAnswered(EventData):
    """The windows asked for, and the one's recent audit lines (oldest first)."""

    event_type: ClassVar[str] = "ops.pool.show.answered"
    schema_version: ClassVar[int] = 1

    windows: tuple[PoolWindows, ...] = Field(
        max_length=MAX_ITEMS, description="By scope and name; none: no restriction anywhere."
    )
    history: tuple[AuditEntry, ...] = Field(
        default=(), max_length=MAX_POOL_HISTORY, description="The one's recent audit lines."
    )


# ``lockstep fabric list|show`` (the planner's fabric domains).
MAX_DOMAINS = 5000


class FabricDomainState(Part):
    """A fabric (NVLink) domain as the planner keeps it, OCI's field names where it has one."""

    domain: Annotated[str, Field(min_length=1, max_length=128)] = Field(description="Domain.")
    current: Annotated[str, Field(max_length=256)] | None = Field(
        description="The bundle it runs (ID@VERSION, or its stack hash)."
    )
    current_stack_hash: Annotated[str, Field(max_length=128)] | None = Field(
        description="Its stack hash."
    )
    target: Annotated[str, Field(max_length=256)] | None = Field(
        description="The bundle it is pinned to."
    )
    target_stack_hash: Annotated[str, Field(max_length=128)] | None = Field(
        description="Its stack hash."
    )
    lifecycle: Label = Field(description="AVAILABLE, OCCUPIED or PROVISIONING.")
    update_state: Label = Field(description="WILL_UPDATE, NO_UPDATE or SKIP_RECYCLE_ENABLED.")
    update_reason: Annotated[str, Field(max_length=65536)] = Field(description="Why.")
    recycle_level: Label = Field(description="FULL_RECYCLE or SKIP_RECYCLE.")
    rollout_id: Annotated[str, Field(max_length=128)] | None = Field(
        description="The rollout holding it, if any."
    )
    nodes: tuple[NodeId, ...] = Field(max_length=MAX_NODES, description="Its nodes.")
    changed_by: Annotated[str, Field(max_length=256)] = Field(description="Who changed it last.")
    changed_at: AwareDatetime = Field(description="When.")


class FabricListRequested(EventData):
    """``lockstep fabric list``."""

    event_type: ClassVar[str] = "ops.fabric.list.requested"
    schema_version: ClassVar[int] = 1


class FabricListAnswered(EventData):
    """Every fabric domain, by id."""

    event_type: ClassVar[str] = "ops.fabric.list.answered"
    schema_version: ClassVar[int] = 1

    domains: tuple[FabricDomainState, ...] = Field(max_length=MAX_DOMAINS, description="By id.")


class FabricShowRequested(EventData):
    """``lockstep fabric show DOMAIN``."""

    event_type: ClassVar[str] = "ops.fabric.show.requested"
    schema_version: ClassVar[int] = 1

    domain: Annotated[str, Field(min_length=1, max_length=128)] = Field(description="Domain.")


class FabricShowAnswered(EventData):
    """One fabric domain and its recent audit lines, oldest first."""

    event_type: ClassVar[str] = "ops.fabric.show.answered"
    schema_version: ClassVar[int] = 1

    domain: FabricDomainState = Field(description="The domain.")
    history: tuple[AuditEntry, ...] = Field(max_length=MAX_ITEMS, description="Recent lines.")


class FleetGoldenRequested(EventData):
    """``lockstep fleet pin --from-node NODE``: the stack a known-good node runs."""

    event_type: ClassVar[str] = "ops.fleet.golden.requested"
    schema_version: ClassVar[int] = 1

    node_id: NodeId = Field(description="The known-good node.")


class FleetGoldenAnswered(EventData):
    """``{profile: stack}`` of the node: what its last sweep and agent report say it runs."""

    event_type: ClassVar[str] = "ops.fleet.golden.answered"
    schema_version: ClassVar[int] = 1

    stack: dict[Name, ProfileStack] = Field(
        max_length=1, description="The node's profile and the versions it runs."
    )


class RolloutControlRequested(EventData):
    """``lockstep rollout approve|pause|resume|abort ROLLOUT``: a command the planner carries
    out, with an audit line; its outcome is the reply."""

    event_type: ClassVar[str] = "ops.rollout.control.requested"
    schema_version: ClassVar[int] = 1

    rollout_id: RolloutId = Field(description="Rollout.")
    action: Annotated[str, Field(pattern=r"^(approve|pause|resume|abort)$")] = Field(
        description="approve, pause, resume or abort."
    )
    by: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="Who asks, as they name themselves (the approver's name for approve); the "
        "NATS identity that asked is recorded beside it."
    )
    reason: Annotated[str, Field(max_length=TEXT_MAX)] = Field(
        default="", description="Why, for the audit trail."
    )
    approval: Annotated[str, Field(max_length=8192)] | None = Field(
        default=None,
        description="approve: the approver's signed record (JSON: approver, plan_hash, "
        "base64 Ed25519 signature over the plan).",
    )


class RolloutControlAnswered(EventData):
    """What the planner did with the command."""

    event_type: ClassVar[str] = "ops.rollout.control.answered"
    schema_version: ClassVar[int] = 1

    command_id: Annotated[int, Field(ge=1, le=INT64_MAX)] = Field(description="Its id.")
    outcome: Annotated[str, Field(max_length=65536)] = Field(
        description="done... or refused: why; queued when the planner has not carried it out."
    )


class FabricPinRequested(EventData):
    """``lockstep fabric pin DOMAIN --bundle ID[@VERSION]``: set a domain's target bundle."""

    event_type: ClassVar[str] = "ops.fabric.pin.requested"
    schema_version: ClassVar[int] = 1

    domain: Annotated[str, Field(min_length=1, max_length=128)] = Field(description="Domain.")
    bundle: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="Attested bundle: ID[@VERSION] (the newest attested version without one)."
    )
    by: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="Who asks, as they name themselves (the identity is recorded beside it)."
    )


class FabricPinAnswered(EventData):
    """What the planner did with the pin."""

    event_type: ClassVar[str] = "ops.fabric.pin.answered"
    schema_version: ClassVar[int] = 1

    command_id: Annotated[int, Field(ge=1, le=INT64_MAX)] = Field(description="Its id.")
    stack_hash: StackHash = Field(description="The bundle's stack hash.")
    outcome: Annotated[str, Field(max_length=65536)] = Field(
        description="done... or refused: why; queued when the planner has not carried it out."
    )


# ``lockstep rollout plan|start|list`` (issue 26, item 3): the planner plans on request and
# answers with its decision. A 12,500-node plan is over NATS's 1 MiB: the answer is the plan's
# summary, and where each node goes comes a page at a time (``offset``), each page under
# PLAN_PAGE_BYTES of node ids.
PLAN_PAGE_BYTES = 384 * 1024
MAX_ROLLOUTS_PAGE = 100
BUNDLE_REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}(@[^\s@]{1,64})?$"
"""``ID[@VERSION]``, as operators name an attested bundle."""
BundleRef = Annotated[str, Field(pattern=BUNDLE_REF_PATTERN)]


class PlanAsk(Part):
    """What a plan is asked for: a target, a scope, a class and a strategy (the plan's seed is a
    digest of these, so the same ask over the same fleet is the same plan)."""

    bundle: BundleRef | None = Field(
        default=None,
        description="Attested bundle ID[@VERSION] (the newest attested version without one); "
        "or give stack_hash.",
    )
    stack_hash: StackHash | None = Field(
        default=None, description="The target by its stack hash (what a reviewed plan asked)."
    )
    scope: ScopeSelector = Field(default_factory=ScopeSelector, description="Which nodes.")
    change_class: ChangeClass = Field(description="Decides approvals, canary width and soak.")
    strategy: Strategy = Field(default_factory=Strategy, description="Strategy overrides.")

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.bundle is None) == (self.stack_hash is None):
            raise ValueError("give the target as exactly one of bundle or stack_hash")
        return self


class PlanWaveSummary(Part):
    """One wave of a plan, counted."""

    number: Annotated[int, Field(ge=0, le=INT32_MAX)] = Field(description="0 is the canary.")
    nodes: Count = Field(description="Nodes in it.")
    components: tuple[Label, ...] = Field(max_length=MAX_SMALL, description="What it moves.")
    failure_budget: Count = Field(description="Failed nodes tolerated before it halts.")
    start_s: Count = Field(description="Estimated start, seconds after the plan starts.")
    end_s: Count = Field(description="Estimated end of its gate (last soak included).")


class DeferredWave(Part):
    """A wave waiting for an occupied fabric domain to be free."""

    number: Annotated[int, Field(ge=0, le=INT32_MAX)] = Field(description="Its wave number.")
    domain: Annotated[str, Field(min_length=1, max_length=128)] = Field(description="Domain.")
    reason: Annotated[str, Field(max_length=1024)] = Field(description="Why it waits.")
    nodes: Count = Field(description="Nodes in it.")


class Exclusions(Part):
    """Nodes in scope the plan leaves alone, for one reason."""

    reason: Annotated[str, Field(max_length=65536)] = Field(description="Why.")
    nodes: Count = Field(description="How many.")


class PlanSummary(Part):
    """A plan without its node lists: what ``lockstep rollout plan`` prints."""

    plan_hash: StackHash = Field(description="What an approval signs; start --plan checks it.")
    ask: PlanAsk = Field(description="What it was planned from (the target as stack_hash).")
    bundle: Annotated[str, Field(max_length=256)] = Field(description="Target as ID@VERSION.")
    starts_at: AwareDatetime = Field(description="The estimates count from here.")
    makespan_s: Count = Field(description="Estimated duration.")
    lower_bound_s: Count = Field(description="No plan of these waves can finish sooner.")
    waves: tuple[PlanWaveSummary, ...] = Field(max_length=MAX_WAVES, description="Canary first.")
    deferred: tuple[DeferredWave, ...] = Field(
        max_length=MAX_DOMAINS, description="Waves waiting for an occupied fabric domain."
    )
    strata: tuple[PlanStratum, ...] = Field(max_length=MAX_ITEMS, description="Strata.")
    excluded: tuple[Exclusions, ...] = Field(
        max_length=MAX_NODES, description="Nodes left alone, by reason."
    )
    nodes: Count = Field(description="Nodes placed: in a wave or excluded (the pages' length).")


class RolloutPlanRequested(EventData):
    """``lockstep rollout plan`` (a dry run: nothing is stored or published), or the plan of a
    planned rollout (``rollout_id``); with ``offset``, a page of where each node goes."""

    event_type: ClassVar[str] = "ops.rollout.plan.requested"
    schema_version: ClassVar[int] = 1

    ask: PlanAsk | None = Field(default=None, description="Plan this (a dry run).")
    rollout_id: RolloutId | None = Field(default=None, description="Or: this rollout's plan.")
    offset: Annotated[int, Field(ge=0, le=MAX_NODES)] | None = Field(
        default=None, description="The page of nodes from here (None: the summary only)."
    )

    @model_validator(mode="after")
    def _one_plan(self) -> Self:
        if (self.ask is None) == (self.rollout_id is None):
            raise ValueError("give exactly one of ask or rollout_id")
        return self


class RolloutPlanAnswered(EventData):
    """The plan's summary and, when asked, a page of where its nodes go; or why it cannot be
    planned."""

    event_type: ClassVar[str] = "ops.rollout.plan.answered"
    schema_version: ClassVar[int] = 1

    plan: PlanSummary | None = Field(default=None, description="The plan (None: refused).")
    reasons: tuple[Annotated[str, Field(max_length=65536)], ...] = Field(
        default=(), max_length=MAX_ITEMS, description="Why it cannot be planned."
    )
    nodes: tuple[NodeId, ...] = Field(
        default=(), max_length=MAX_NODES, description="This page's nodes, in node id order."
    )
    places: tuple[Annotated[int, Field(ge=-MAX_NODES, le=INT32_MAX)], ...] = Field(
        default=(),
        max_length=MAX_NODES,
        description="Where each node goes: its wave number, or -1-i for plan.excluded[i].",
    )
    next_offset: Annotated[int, Field(ge=0, le=MAX_NODES)] | None = Field(
        default=None, description="Ask again from here for the next page (None: done)."
    )


class RolloutStartRequested(EventData):
    """``lockstep rollout start``: plan and start (once the class's approvals are in). The
    request id is the intent's id, so a retried request is the same intent and the same
    decision."""

    event_type: ClassVar[str] = "ops.rollout.start.requested"
    schema_version: ClassVar[int] = 1

    ask: PlanAsk | None = Field(
        default=None, description="What to plan (None: what the plan of plan_hash was asked)."
    )
    plan_hash: StackHash | None = Field(
        default=None,
        description="Start only if the plan comes out with this hash (the reviewed one); "
        "refused, naming the difference, otherwise.",
    )
    approval_ref: Name | None = Field(default=None, description="Change ticket reference.")
    by: Name = Field(description="Who asks, as they name themselves (the identity is recorded).")

    @model_validator(mode="after")
    def _something(self) -> Self:
        if self.ask is None and self.plan_hash is None:
            raise ValueError("give ask, plan_hash, or both")
        return self


class RolloutStartAnswered(EventData):
    """The planner's decision: planned (running, or awaiting approval), refused with every
    reason, or pending when it could not plan yet (it goes on trying)."""

    event_type: ClassVar[str] = "ops.rollout.start.answered"
    schema_version: ClassVar[int] = 1

    intent_id: uuid.UUID = Field(description="The intent (the request's id).")
    rollout_id: RolloutId = Field(description="The rollout it is, or would have been.")
    decision: Annotated[str, Field(pattern=r"^(planned|refused|pending)$")] = Field(
        description="planned, refused or pending."
    )
    state: Label | None = Field(
        default=None, description="The rollout's state: running, or planned (awaiting approval)."
    )
    approvals_needed: Count = Field(default=0, description="Signed approvals its class needs.")
    reasons: tuple[Annotated[str, Field(max_length=65536)], ...] = Field(
        default=(), max_length=MAX_ITEMS, description="Why refused, or why still pending."
    )
    plan: PlanSummary | None = Field(default=None, description="The plan, when planned.")


class RolloutListed(Part):
    """One rollout, for ``lockstep rollout list``."""

    rollout_id: RolloutId = Field(description="Rollout.")
    state: Label = Field(description="planned, running, paused, halted, aborted, completed.")
    change_class: Label = Field(description="Change class.")
    bundle: Annotated[str, Field(max_length=256)] = Field(description="Target as ID@VERSION.")
    nodes: Count = Field(description="Nodes in its waves.")
    approvals: Count = Field(description="Approvals counted.")
    approvals_needed: Count = Field(description="Approvals its class needs.")
    created_at: AwareDatetime = Field(description="Planned at.")
    updated_at: AwareDatetime = Field(description="Last change.")
    reason: Annotated[str, Field(max_length=65536)] = Field(description="Why, when halted.")


class RolloutListRequested(EventData):
    """``lockstep rollout list``: rollouts, newest first, a page at a time (dry runs are not
    rollouts)."""

    event_type: ClassVar[str] = "ops.rollout.list.requested"
    schema_version: ClassVar[int] = 1

    before: RolloutId | None = Field(
        default=None, description="Only rollouts planned before this one (the next page)."
    )
    state: Label | None = Field(default=None, description="Only rollouts in this state.")
    limit: int = Field(
        default=MAX_ROLLOUTS_PAGE, ge=1, le=MAX_ROLLOUTS_PAGE, description="Page size."
    )


class RolloutListAnswered(EventData):
    """One page of rollouts, newest first."""

    event_type: ClassVar[str] = "ops.rollout.list.answered"
    schema_version: ClassVar[int] = 1

    rollouts: tuple[RolloutListed, ...] = Field(
        max_length=MAX_ROLLOUTS_PAGE, description="This page, newest first."
    )
    next_before: RolloutId | None = Field(
        default=None, description="Ask again with before= this for the next page (None: done)."
    )


CATALOGUE: tuple[type[EventData], ...] = (
    BundleSubmitted,
    BundleAttested,
    BundleRejected,
    IntentSubmitted,
    RolloutPlanned,
    RolloutHalted,
    RolloutCompleted,
    WavePlanned,
    WaveCompleted,
    PinChanged,
    MaintenanceWindowsRequested,
    MaintenanceWindowsChanged,
    DeviceStaged,
    DeviceActivated,
    DeviceVerified,
    DeviceFailed,
    DeviceRolledBack,
    GatePassed,
    GateTripped,
    GateInconclusive,
    InventoryObserved,
    HealthObserved,
    DriftDetected,
    DriftResolved,
    StragglersFlagged,
    AdmissionCheckRequested,
    AdmissionCheckAnswered,
    FleetQueryRequested,
    FleetQueryAnswered,
    FleetChanged,
    OpsRefused,
    FleetListRequested,
    FleetListAnswered,
    FleetStatusRequested,
    FleetStatusAnswered,
    FleetShowRequested,
    FleetShowAnswered,
    FleetDriftRequested,
    FleetDriftAnswered,
    FleetRemoveRequested,
    FleetRemoveAnswered,
    FleetImportRequested,
    FleetImportAnswered,
    FleetSweepRequested,
    FleetSweepAnswered,
    FleetSweptRequested,
    FleetSweptAnswered,
    DlqListRequested,
    DlqListAnswered,
    DlqShowRequested,
    DlqShowAnswered,
    DlqPurgeRequested,
    DlqPurgeAnswered,
    BundleSubmitRequested,
    BundleSubmitAnswered,
    BundleListRequested,
    BundleListAnswered,
    BundleShowRequested,
    BundleShowAnswered,
    NodeHistoryRequested,
    NodeHistoryAnswered,
    NodeReleaseRequested,
    NodeReleaseAnswered,
    NodeQuarantinedRequested,
    NodeQuarantinedAnswered,
    NodeApproveRemedyRequested,
    NodeApproveRemedyAnswered,
    GateShowRequested,
    GateShowAnswered,
    FleetStragglersRequested,
    FleetStragglersAnswered,
    RolloutStatusRequested,
    RolloutStatusAnswered,
    RolloutAuditRequested,
    RolloutAuditAnswered,
    PoolShowRequested,
    PoolShowAnswered,
    FabricListRequested,
    FabricListAnswered,
    FabricShowRequested,
    FabricShowAnswered,
    FleetGoldenRequested,
    FleetGoldenAnswered,
    RolloutControlRequested,
    RolloutControlAnswered,
    FabricPinRequested,
    FabricPinAnswered,
    RolloutPlanRequested,
    RolloutPlanAnswered,
    RolloutStartRequested,
    RolloutStartAnswered,
    RolloutListRequested,
    RolloutListAnswered,
    NodeCommandRequested,
    NodeCommandAnswered,
)
