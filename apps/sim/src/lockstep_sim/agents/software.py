"""A node's in-band software and health, seeded and deterministic (no I/O).

Versions and branch facts follow ``research/standards.md`` section 7 (CUDA <-> driver
compatibility, data-center branches). The failure modes are the ones seed 004 describes:
a DKMS build that fails against a new kernel, and a driver upgrade that leaves the loaded
module with no matching ``/lib/firmware/nvidia/<version>/`` directory, so GSP firmware cannot
load and the GPUs drop off the bus (``RmFetchGspRmImages: No firmware image found``).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lockstep_sim.agents import health_model
from lockstep_sim.agents.health_model import NORMAL, Conditions
from lockstep_sim.agents.state import Phase, transition


class BranchType(enum.StrEnum):
    """NVIDIA data-center driver branch designations."""

    LTSB = "ltsb"
    PRODUCTION = "production"
    NEW_FEATURE = "new_feature"


class DkmsState(enum.StrEnum):
    """What ``dkms status`` says about the nvidia module for the target kernel."""

    INSTALLED = "installed"
    BUILT = "built"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class DriverRelease:
    """One driver release and what ships with or pairs with it."""

    version: str
    branch: str
    branch_type: BranchType
    cuda: str
    """Highest CUDA toolkit the driver supports without the forward-compat package."""

    @property
    def cuda_major(self) -> int:
        """Major version of ``cuda``."""
        return int(self.cuda.split(".", 1)[0])


# standards.md section 7: R535/R580 are LTSBs, R570/R595 production, R610 new-feature; CUDA 13
# needs >= 580 and 12.x >= 525. 580.65.06 pairs with 13.0 GA; 595.58.03 with 13.2.
CATALOG: dict[str, DriverRelease] = {
    r.version: r
    for r in (
        DriverRelease("535.261.03", "R535", BranchType.LTSB, "12.2"),
        DriverRelease("570.172.08", "R570", BranchType.PRODUCTION, "12.8"),
        DriverRelease("580.65.06", "R580", BranchType.LTSB, "13.0"),
        DriverRelease("580.95.05", "R580", BranchType.LTSB, "13.0"),
        DriverRelease("595.58.03", "R595", BranchType.PRODUCTION, "13.2"),
    )
}
NCCL_VERSION = "2.27.7"
DEFAULT_KERNEL = "6.8.0-87-generic"
EXPECTED_BUSBW_GBPS = health_model.BASELINES[health_model.DEFAULT_PROFILE].expected_busbw_gbps
"""The default (GB200) profile's all_reduce busbw the health gate compares against."""
BUSBW_DEGRADED_RATIO = health_model.BUSBW_GATE_RATIO
"""Below this fraction of expected busbw the health gate should trip."""


@dataclass(frozen=True, slots=True)
class SoftwareState:
    """What an in-band agent can read on a node."""

    driver: DriverRelease
    """Installed driver packages (may differ from the loaded module until reboot)."""
    loaded_module: str | None
    """``/sys/module/nvidia/version``; None when the module is not loaded."""
    gsp_firmware: str | None
    """GSP firmware version the GPUs run (``nvidia-smi -q``); None when unreadable."""
    firmware_dirs: tuple[str, ...]
    """Versions under ``/lib/firmware/nvidia/``."""
    kernel: str
    pending_kernel: str | None
    dkms: DkmsState
    cuda: str
    nccl: str
    nccl_cuda_major: int
    fabric_manager: str | None
    """nvidia-fabricmanager version; it must equal the driver version to start."""
    module_rejected: bool = False
    """The kernel refused to load the module at the last boot: Secure Boot and an unsigned
    module (``dmesg``: "module verification failed")."""

    def gsp_aligned(self) -> bool:
        """True when a firmware dir exists for the loaded module (seed 004 pre-check 2)."""
        return self.loaded_module is not None and self.loaded_module in self.firmware_dirs


@dataclass(slots=True)
class Faults:
    """Fault knobs for one node (all off by default)."""

    dkms_fails_on_new_kernel: bool = False
    """Building the module against a kernel other than the running one fails."""
    missing_firmware_dir: bool = False
    """The next driver install leaves no ``/lib/firmware/nvidia/<new>`` dir (seed 004)."""
    degrading_versions: frozenset[str] = frozenset()
    """Driver versions that boot fine and then degrade health (XID 79/48 up, busbw down)."""
    degrade_onset_reports: int = 3
    """Healthy reports after boot before a degrading image starts to show."""
    secure_boot_rejects_module: bool = False
    """Secure Boot is on and the DKMS-built module is unsigned: the next boot loads no module
    (seed 004 "Not this runbook": a signing problem, not a GSP mismatch)."""


POWER_W_PER_MHZ = health_model.BASELINES["gb200"].power_w_per_mhz


@dataclass(frozen=True, slots=True)
class HealthSample:
    """One health report's worth of measurements."""

    dcgm_level: int
    dcgm_passed: bool
    xid_counts: dict[str, int]
    nccl_busbw_gbps: float | None
    nccl_expected_gbps: float
    sm_clock_mhz: float | None
    throttle_reasons: tuple[str, ...]
    max_temperature_c: float | None
    heartbeat: int
    """Reports since the agent started (a liveness counter)."""
    gpu_power_w: float | None = None
    ecc_sbe_count: int = 0
    row_remap_pending: int = 0
    pcie_replay_count: int = 0
    nvlink_crc_error_count: int = 0
    gsp_init_failed: bool = False


def initial_state(driver_version: str, kernel: str = DEFAULT_KERNEL) -> SoftwareState:
    """A cleanly installed node on ``driver_version``."""
    release = CATALOG[driver_version]
    return SoftwareState(
        driver=release,
        loaded_module=release.version,
        gsp_firmware=release.version,
        firmware_dirs=(release.version,),
        kernel=kernel,
        pending_kernel=None,
        dkms=DkmsState.INSTALLED,
        cuda=release.cuda,
        nccl=NCCL_VERSION,
        nccl_cuda_major=release.cuda_major,
        fabric_manager=release.version,
    )


@dataclass(slots=True)
class NodeSoftware:
    """One node's in-band stack and health generator.

    Args:
        node_id: the node's id; with ``seed`` it fixes every random draw.
        seed: fleet seed; the same (seed, node_id) always yields the same reports.
        driver_version: installed driver at start (a key of ``CATALOG``).
        faults: fault knobs, mutable while the simulation runs.
        profile: hardware profile (a key of ``health_model.BASELINES``): its health baseline.
        cadence_s: simulated seconds between two reports: the health series' clock (the
            diurnal drift reads ``reports * cadence_s``, never the wall clock, so a seed fixes
            the series).
    """

    node_id: str
    seed: int = 0
    driver_version: str = "580.65.06"
    faults: Faults = field(default_factory=Faults)
    profile: str = health_model.DEFAULT_PROFILE
    cadence_s: float = 10.0
    benign_xid_rate: float = health_model.BENIGN_XID_RATE
    diurnal_period_s: float = health_model.DIURNAL_PERIOD_S
    phase: Phase = Phase.READY
    state: SoftwareState = field(init=False)
    reports: int = 0
    reports_since_boot: int = 0
    firmware_degraded: Callable[[], bool] = field(default=lambda: False, repr=False)
    """Set by the fleet runtime: True once the BMC activated an image that degrades health
    (the simulator's ``degrade_health`` fault), so firmware and in-band health stay coherent."""
    firmware_degraded_reports: int = 0
    conditions: Callable[[], Conditions] = field(default=lambda: NORMAL, repr=False)
    """Set by the fleet runtime: what the simulator's health scenarios (a thermal event, a
    network problem: ``faults.HEALTH_KINDS``) do to this node right now."""
    _rng: random.Random = field(init=False, repr=False)
    _offsets: health_model.NodeOffsets = field(init=False, repr=False)
    _baseline: health_model.ProfileBaseline = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.state = initial_state(self.driver_version)
        self._baseline = health_model.BASELINES[self.profile]
        self._offsets = health_model.node_offsets(self.seed, self.node_id)
        # String seeds hash with SHA-512, so this is stable across runs and processes.
        self._rng = random.Random(f"{self.seed}:{self.node_id}")  # noqa: S311 - simulation

    def _go(self, target: Phase) -> None:
        self.phase = transition(self.phase, target)

    def install_driver(self, version: str, *, kernel: str | None = None) -> None:
        """Install a driver release's packages (and optionally a new kernel to boot next).

        Raises:
            KeyError: ``version`` is not in ``CATALOG``.
            InvalidTransition: not allowed from the current phase.
        """
        release = CATALOG[version]
        self._go(Phase.DRIVER_INSTALLED)
        # Normally the package set ships the GSP blobs for exactly its own version (NVIDIA:
        # "GSP firmware ships inside the driver package") and replaces the old branch's dir.
        # Seed 004's fault: an interrupted upgrade installs no dir for the new version, so only
        # the old branch's directory remains.
        keep_old = self.faults.missing_firmware_dir
        dirs = self.state.firmware_dirs if keep_old else (release.version,)
        self.state = replace(
            self.state,
            driver=release,
            firmware_dirs=dirs,
            pending_kernel=kernel,
            dkms=DkmsState.INSTALLED,
            cuda=release.cuda,
            nccl_cuda_major=release.cuda_major,
        )
        self.rebuild_dkms()

    def install_cuda_toolkit(self, version: str) -> None:
        """Install a CUDA toolkit by hand (``cuda-toolkit-X-Y`` without ``cuda-drivers``).

        The toolkit is userspace only: no module, firmware or phase changes, and, as with apt,
        nothing checks that the installed driver supports it (standards.md section 7), which is
        exactly how a node ends up with a toolkit newer than its driver.
        """
        self.state = replace(self.state, cuda=version)

    def rebuild_dkms(self) -> None:
        """Build the module for the kernel that boots next (``dkms autoinstall``).

        Raises:
            InvalidTransition: not allowed from the current phase.
        """
        target_kernel = self.state.pending_kernel or self.state.kernel
        failed = self.faults.dkms_fails_on_new_kernel and target_kernel != self.state.kernel
        self._go(Phase.DKMS_FAILED if failed else Phase.DKMS_BUILT)
        self.state = replace(self.state, dkms=DkmsState.FAILED if failed else DkmsState.BUILT)

    def reboot(self) -> Phase:
        """Reboot and load whatever module is built; returns the resulting phase.

        Raises:
            InvalidTransition: not allowed from the current phase (e.g. after a failed build).
        """
        self._go(Phase.REBOOTING)
        self.reports_since_boot = 0
        new = self.state.driver.version
        kernel = self.state.pending_kernel or self.state.kernel
        if self.faults.secure_boot_rejects_module:
            self.state = replace(
                self.state,
                loaded_module=None,
                gsp_firmware=None,
                kernel=kernel,
                pending_kernel=None,
                module_rejected=True,
            )
            self._go(Phase.MODULE_REJECTED)
        elif new in self.state.firmware_dirs:
            self.state = replace(
                self.state,
                loaded_module=new,
                gsp_firmware=new,
                kernel=kernel,
                pending_kernel=None,
                fabric_manager=new,
                module_rejected=False,
            )
            self._go(Phase.READY)
        else:
            # Seed 004: the module loads but RmFetchGspRmImages finds no firmware image, so
            # RmInitAdapter fails; GSP keeps reporting the old version where readable at all.
            self.state = replace(
                self.state,
                loaded_module=new,
                kernel=kernel,
                pending_kernel=None,
                module_rejected=False,
            )
            self._go(Phase.GSP_MISMATCH)
        return self.phase

    def diag_passes(self) -> bool:
        """``dcgmi diag -r 1`` (seed 004 "Verification"): NVML and CUDA load, every GPU is
        enumerated; False on a broken phase or an image that degrades health."""
        return self.phase is Phase.READY and self.state.gsp_aligned() and not self._degrading()

    def _degrading(self) -> bool:
        return self.state.loaded_module in self.faults.degrading_versions and (
            self.reports_since_boot > self.faults.degrade_onset_reports
        )

    def _degrade_step(self) -> int:
        """How many reports a degrading image has been showing (0: not degrading)."""
        if self.phase is not Phase.READY:
            return 0
        if self.firmware_degraded():
            self.firmware_degraded_reports += 1
            return self.firmware_degraded_reports
        if self.state.loaded_module not in self.faults.degrading_versions:
            return 0
        return max(0, self.reports_since_boot - self.faults.degrade_onset_reports)

    def sample_health(self) -> HealthSample:
        """Advance one report and measure health."""
        self.reports += 1
        self.reports_since_boot += 1
        expected = self._baseline.expected_busbw_gbps
        reading = health_model.read(
            self._rng,
            self._baseline,
            self._offsets,
            sim_seconds=self.reports * self.cadence_s,
            conditions=self.conditions(),
            benign_xid_rate=self.benign_xid_rate,
            diurnal_period_s=self.diurnal_period_s,
        )
        if self.phase in {Phase.GSP_MISMATCH, Phase.MODULE_REJECTED}:
            # GPUs that failed RmInitAdapter have fallen off the bus: XID 79, DCGM -r 1 fails
            # at the NVML/deployment layer, and no clocks or NCCL numbers can be measured.
            return HealthSample(
                1,
                False,
                {"79": 1},
                None,
                expected,
                None,
                (),
                None,
                self.reports,
                gsp_init_failed=self.phase is Phase.GSP_MISMATCH,
            )
        step = self._degrade_step()
        ratio = reading.busbw_ratio
        xids = dict(reading.benign_xids)
        if step:
            # A degrading image: XID 48 (double-bit ECC) then 79 (fell off the bus) rise with
            # every report, and busbw sinks under the 92% gate threshold.
            xids |= {"48": step, "79": (step + 1) // 2}
            ratio = min(ratio, max(0.3, BUSBW_DEGRADED_RATIO - 0.03 * step))
        return HealthSample(
            dcgm_level=1,
            dcgm_passed=not step,
            xid_counts=xids,
            nccl_busbw_gbps=round(expected * ratio, 2),
            nccl_expected_gbps=expected,
            sm_clock_mhz=reading.sm_clock_mhz,
            throttle_reasons=reading.throttle_reasons,
            max_temperature_c=reading.temperature_c,
            heartbeat=self.reports,
            gpu_power_w=reading.power_w,
        )
