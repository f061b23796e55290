"""Realistic health series of a node (issue 11 item 7): pure, seeded, no clock reads.

A healthy node's report is its profile's baseline, times a persistent per-node offset (no two
boards or NVLink domains measure the same), plus per-report noise, plus a slow diurnal drift
common to the whole fleet (inlet air and shared fabric load follow the day), plus, rarely, a
benign XID. Scenarios (``Conditions``) then bend the series the way a thermal event or a
fleet-wide network problem would.

Figures: seed 001 gives the NCCL acceptance gate (busbw >= ~92% of expected; ~370 GB/s on a
400G NDR fabric, used for the HGX H100 profile). The GB200 busbw, the clocks (under the H100
SXM's 1,980 MHz boost), temperatures, power, noise widths, drift amplitudes and XID rate are
illustrative: plausible for a busy training fleet, not measurements. They only have to be
realistic enough that the healthgate's floors and hard rules meet the spread they were tuned for
(a healthy node never dips under the 92% busbw rule: noise is clipped at 93.5%).
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

BUSBW_GATE_RATIO = 0.92
"""Seed 001's acceptance bar: below this fraction of expected busbw the health gate trips."""


@dataclass(frozen=True, slots=True)
class ProfileBaseline:
    """What a healthy node of one hardware profile shows under a training load."""

    expected_busbw_gbps: float
    """The all_reduce busbw the profile should reach (reported as ``nccl_expected_gbps``)."""
    sm_clock_mhz: float
    """Median sustained SM clock under load."""
    temperature_c: float
    """Hottest GPU at load, at the diurnal mean."""
    power_w_per_mhz: float
    """Board power per MHz of SM clock at a steady load."""


BASELINES: dict[str, ProfileBaseline] = {
    # Illustrative: ~1,000 W per GB200 board at ~1,900 MHz (the simulator's earlier figure).
    "gb200": ProfileBaseline(450.0, 1865.0, 63.0, 0.52),
    # Seed 001: ~370 GB/s busbw on a 400G NDR fabric; ~700 W (the H100 SXM TDP) at ~1,900 MHz.
    "hgx-h100": ProfileBaseline(370.0, 1830.0, 66.0, 0.37),
}
DEFAULT_PROFILE = "gb200"

BUSBW_MEAN_RATIO = 0.975  # a healthy node reaches ~97.5% of expected on average
BUSBW_NOISE = 0.008  # per-report standard deviation, as a fraction of expected
BUSBW_CLIP = (0.935, 0.999)  # a healthy run never breaks the 92% rule nor beats the ceiling
NODE_BUSBW_OFFSET = 0.005  # per-node persistent offset (standard deviation, fraction)
CLOCK_NOISE = 0.01
NODE_CLOCK_OFFSET = 0.005
TEMPERATURE_NOISE_C = 1.5
NODE_TEMPERATURE_OFFSET_C = 2.0
OFFSET_CLIP = 2.5  # persistent offsets are clipped at 2.5 standard deviations
DIURNAL_PERIOD_S = 86_400.0
DIURNAL_TEMPERATURE_C = 2.5  # amplitude of the daily swing of the hottest GPU
DIURNAL_BUSBW = 0.004  # amplitude of the daily swing of busbw (shared fabric load)
POWER_CAP_SHARE = 0.05  # reports that show a software power cap (normal for a busy GPU)

BENIGN_XID_RATE = 0.0005
"""Per report: ~4 a day per node at a 10 s cadence (illustrative)."""
BENIGN_XIDS = ("13", "31", "43")
"""Application-level XIDs (NVIDIA's XID catalogue: graphics engine exception, GPU memory page
fault, GPU stopped processing): a user program's fault, not the GPU's, so outside the
healthgate's fatal set; they count only toward its ``xid_nonfatal_count`` metric."""

THERMAL_THROTTLE_REASONS = ("hw_thermal_slowdown", "sw_thermal_slowdown")
"""NVML ``clocksThrottleReasons`` a thermal event sets (the healthgate counts them as throttled)."""


@dataclass(frozen=True, slots=True)
class Conditions:
    """What a scenario does to a node's series right now (``NORMAL``: nothing)."""

    busbw_factor: float = 1.0
    """Multiplies busbw (a network problem)."""
    clock_factor: float = 1.0
    """Multiplies SM clocks (a thermal event); busbw follows half of the loss, since a slow GPU
    slows every collective it takes part in."""
    temperature_rise_c: float = 0.0
    throttle_reasons: tuple[str, ...] = ()

    def combine(self, other: Conditions) -> Conditions:
        """Both at once (two scenarios on one node)."""
        reasons = self.throttle_reasons + tuple(
            r for r in other.throttle_reasons if r not in self.throttle_reasons
        )
        return Conditions(
            self.busbw_factor * other.busbw_factor,
            self.clock_factor * other.clock_factor,
            self.temperature_rise_c + other.temperature_rise_c,
            reasons,
        )


NORMAL = Conditions()


@dataclass(frozen=True, slots=True)
class NodeOffsets:
    """A node's persistent deviation from its profile (fixed by seed and node id)."""

    busbw: float
    clock: float
    temperature_c: float


def _clipped_gauss(rng: random.Random, sd: float) -> float:
    return max(-OFFSET_CLIP * sd, min(OFFSET_CLIP * sd, rng.gauss(0.0, sd)))


def node_offsets(seed: int, node_id: str) -> NodeOffsets:
    """The node's offsets: drawn from their own generator, so that they never shift the
    per-report draws (and stay the same whatever the node reports)."""
    digest = hashlib.sha256(f"offsets:{seed}:{node_id}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))  # noqa: S311 - simulation
    return NodeOffsets(
        busbw=_clipped_gauss(rng, NODE_BUSBW_OFFSET),
        clock=_clipped_gauss(rng, NODE_CLOCK_OFFSET),
        temperature_c=_clipped_gauss(rng, NODE_TEMPERATURE_OFFSET_C),
    )


def diurnal(sim_seconds: float, period_s: float = DIURNAL_PERIOD_S) -> float:
    """The fleet's daily phase as -1..1 (peaks a quarter period after the fleet's start); the
    same for every node at a given simulated time, so canary and control drift together."""
    return math.sin(2 * math.pi * sim_seconds / period_s)


@dataclass(frozen=True, slots=True)
class Reading:
    """The gauges of one healthy-or-scenario report (before any image degradation)."""

    busbw_ratio: float
    """Of the profile's expected busbw."""
    sm_clock_mhz: float
    temperature_c: float
    power_w: float
    throttle_reasons: tuple[str, ...]
    benign_xids: dict[str, int]


def read(
    rng: random.Random,
    baseline: ProfileBaseline,
    offsets: NodeOffsets,
    *,
    sim_seconds: float,
    conditions: Conditions = NORMAL,
    benign_xid_rate: float = BENIGN_XID_RATE,
    diurnal_period_s: float = DIURNAL_PERIOD_S,
) -> Reading:
    """One report's gauges. Always takes the same draws from ``rng`` in the same order, so a
    scenario switched on or off changes the values it bends and nothing else."""
    phase = diurnal(sim_seconds, diurnal_period_s)
    busbw_noise = rng.gauss(0.0, BUSBW_NOISE)
    clock_noise = rng.gauss(0.0, CLOCK_NOISE)
    temp_noise = rng.gauss(0.0, TEMPERATURE_NOISE_C)
    power_capped = rng.random() < POWER_CAP_SHARE
    xid_roll = rng.random()
    xid_code = rng.choice(BENIGN_XIDS)

    low, high = BUSBW_CLIP
    ratio = BUSBW_MEAN_RATIO + offsets.busbw + busbw_noise - DIURNAL_BUSBW * phase
    ratio = max(low, min(high, ratio))
    clock_scale = conditions.clock_factor * (0.97 if power_capped else 1.0)
    ratio *= conditions.busbw_factor * (1.0 - 0.5 * (1.0 - conditions.clock_factor))
    clock = baseline.sm_clock_mhz * (1.0 + offsets.clock + clock_noise) * clock_scale
    temperature = (
        baseline.temperature_c
        + offsets.temperature_c
        + temp_noise
        + DIURNAL_TEMPERATURE_C * phase
        + conditions.temperature_rise_c
    )
    reasons = (("sw_power_cap",) if power_capped else ()) + conditions.throttle_reasons
    return Reading(
        busbw_ratio=ratio,
        sm_clock_mhz=round(clock, 1),
        temperature_c=round(temperature, 1),
        power_w=round(clock * baseline.power_w_per_mhz, 1),
        throttle_reasons=reasons,
        benign_xids={xid_code: 1} if xid_roll < benign_xid_rate else {},
    )
