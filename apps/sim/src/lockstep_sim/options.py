"""``SimOptions``: what an emulated fleet of BMCs is built from (``Simulator``, ``FleetRuntime``
and both ``sim`` commands take this one object)."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

from lockstep_sim.faults import FaultPlan

DEFAULT_USERNAME = "admin"
DEFAULT_PASSWORD = "lockstep-sim"  # noqa: S105 - documented default of a local emulator
OPERATOR_USERNAME = "operator"
"""The Operator-class account every emulated BMC also has (same password as the administrator):
the one Lockstep's services log in with, its role what the dialect's update calls need (Operator;
FirmwareOperator on Supermicro): the updater refuses Administrator-class accounts
(reliability.md 7 H5, least privilege)."""


@dataclass(frozen=True)
class SimOptions:
    """``SimOptions(4, "gb200", port=0)``: ``nodes`` BMCs of ``profile``, ``seed`` choosing the
    fleet; one loopback address each from ``host_base`` on one ``port`` (0: any free);
    ``time_scale`` real seconds per simulated BMC minute; ``latency_ms`` added per request;
    ``multipart_push=False`` leaves ``MultipartHttpPushUri`` out of every UpdateService, as BMCs
    before UpdateService v1_6_0 (only ``SimpleUpdate`` remains).

    ``advertise`` (a host name or address others reach this machine by): every BMC listens on
    all interfaces instead, each on its own port (``port`` + its index; 0: any free each), and
    ``/fleet.json`` names ``http://<advertise>:<its port>``. For a simulator in a container,
    reached over a container network (compose.sim.yaml), where the other containers cannot
    reach its loopback addresses."""

    nodes: int = 1
    profile: str = "gb200"
    _: KW_ONLY
    latency_ms: float = 0.0
    time_scale: float = 1.0
    seed: int = 0
    username: str = DEFAULT_USERNAME
    password: str = DEFAULT_PASSWORD
    host_base: str = "127.1.0.1"
    port: int = 8000
    faults: FaultPlan | None = None
    multipart_push: bool = True
    dialect: str = "lockstep"  # lockstep_sim.dialects: the Redfish dialect every BMC speaks
    advertise: str | None = None

    def __post_init__(self) -> None:
        if self.time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        from lockstep_sim.dialects import dialect_named

        dialect_named(self.dialect)  # ValueError naming the known dialects
