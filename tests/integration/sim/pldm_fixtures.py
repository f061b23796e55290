"""PLDM packages for the simulator tests, built with lockstep_common.pldm.build_package."""

from __future__ import annotations

from datetime import UTC, datetime

from lockstep_common.pldm import ComponentSpec, RecordSpec, build_package
from lockstep_common.pldm.header import FormatRevision
from lockstep_sim.profiles import GB200, ComponentClass

GB200_GPU: ComponentClass = next(c for c in GB200 if c.kind == "gpu")
NEW_GPU_VERSION = "97.00.9A.00.01"


def package_for(cls: ComponentClass, version: str, *, pci_device: int | None = None) -> bytes:
    """A PLDM 1.0 package with one record for ``cls``'s device and one component image."""
    descriptors = [(0x0000, cls.pci_vendor), (0x0100, pci_device or cls.pci_device)]
    return build_package(
        revision=FormatRevision.V1_0,
        version=f"sim-{version}",
        release_time=datetime(2026, 11, 1, tzinfo=UTC),
        components=[
            ComponentSpec(image=b"\x5a" * 4096, identifier=cls.pldm_component_id, version=version)
        ],
        device_records=[
            RecordSpec(descriptors=descriptors, applicable_components=[0], version=version)
        ],
    )
