"""The fleet model: nodes, their placement and their firmware inventory (pure, seedable)."""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass, field
from typing import Any

from lockstep_sim.profiles import PROFILE_CLASSES, PROFILES, ComponentClass

SUPPLIERS = ("supplier-a", "supplier-b", "supplier-c")
SITES = ("site-ams1", "site-fra2")
NODES_PER_RACK = 18  # a GB200 NVL36x2 half-rack of compute trays
RACKS_PER_DOMAIN = 4
POOLS = ("training", "inference", "batch")


@dataclass(slots=True)
class FirmwareComponent:
    """One FirmwareInventory member (SoftwareInventory v1_13_0) with optional A/B banks.

    ``version`` is the active bank; ``inactive_version`` the other bank (None without banks);
    ``staged`` is True when the inactive bank holds an image waiting for Activate.
    """

    id: str
    cls: ComponentClass
    version: str
    inactive_version: str | None
    staged: bool = False
    write_protected: bool = False
    health: str = "OK"
    bricked: bool = False  # fault "bricked": UnavailableOffline, Critical, no Version

    @property
    def banks(self) -> bool:
        return self.cls.banks


@dataclass(slots=True)
class Node:
    """One emulated machine and its BMC."""

    id: str
    index: int
    address: str
    profile: str
    supplier: str
    site: str
    rack: str
    fabric_domain: str
    pool: str
    components: dict[str, FirmwareComponent] = field(default_factory=dict)
    # Set by the ``degrade_health`` fault after an activation; the node agents
    # (lockstep_sim.agents) read it to report degraded in-band health (reliability.md 7.F1).
    degraded_after_activation: bool = False

    def descriptors(self, member_id: str) -> tuple[tuple[int, int], ...]:
        return self.components[member_id].cls.descriptors()

    def summary(self, port: int, host: str | None = None) -> dict[str, Any]:
        """The node's ``/fleet.json`` entry, its BMC at ``host`` (default its own address) and
        ``port``. The simulator serves plain http, so its entries allow credentials over it
        (``allow_plain_http``); real BMCs' entries should not."""
        return {
            "id": self.id,
            "bmc_url": f"http://{host or self.address}:{port}",
            "allow_plain_http": True,
            "profile": self.profile,
            "supplier": self.supplier,
            "site": self.site,
            "rack": self.rack,
            "fabric_domain": self.fabric_domain,
            "pool": self.pool,
        }


def _addresses(host_base: str, count: int) -> list[str]:
    """``count`` loopback addresses from ``host_base``, skipping .0 and .255 host octets."""
    out: list[str] = []
    address = ipaddress.IPv4Address(host_base)
    while len(out) < count:
        if not address.is_loopback:
            raise ValueError(f"{count} nodes do not fit in 127.0.0.0/8 from {host_base}")
        if str(address).rsplit(".", 1)[1] not in {"0", "255"}:
            out.append(str(address))
        address += 1
    return out


def _components(
    classes: tuple[ComponentClass, ...], rng: random.Random
) -> dict[str, FirmwareComponent]:
    members: dict[str, FirmwareComponent] = {}
    for cls in classes:
        for member_id in cls.ids:
            # A few nodes carry an older image in the spare bank, as a fleet does after rollouts.
            inactive = cls.version if rng.random() < 0.8 else f"{cls.version}-prev"
            members[member_id] = FirmwareComponent(
                id=member_id,
                cls=cls,
                version=cls.version,
                inactive_version=inactive if cls.banks else None,
            )
    return members


def build_fleet(
    nodes: int, profile: str, seed: int = 0, host_base: str = "127.1.0.1"
) -> list[Node]:
    """``nodes`` nodes of ``profile`` (``mixed`` alternates GB200 and HGX H100 at random)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    if nodes < 1:
        raise ValueError("a fleet needs at least one node")
    rng = random.Random(seed)  # noqa: S311 - simulation, not cryptography
    fleet: list[Node] = []
    for index, address in enumerate(_addresses(host_base, nodes)):
        node_profile = profile if profile != "mixed" else rng.choice(("gb200", "hgx-h100"))
        rack = index // NODES_PER_RACK
        fleet.append(
            Node(
                id=f"node-{index:05d}",
                index=index,
                address=address,
                profile=node_profile,
                supplier=rng.choice(SUPPLIERS),
                site=SITES[(rack // RACKS_PER_DOMAIN) % len(SITES)],
                rack=f"rack-{rack:04d}",
                fabric_domain=f"nvl-domain-{rack // RACKS_PER_DOMAIN:03d}",
                pool=rng.choice(POOLS),
                components=_components(PROFILE_CLASSES[node_profile], rng),
            )
        )
    return fleet
