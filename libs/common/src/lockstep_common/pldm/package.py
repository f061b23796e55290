"""The parsed form of a PLDM firmware update package (DSP0267 1.0-1.3) and its queries.

Everything is a frozen dataclass. Component images are never copied: a ComponentImage records
its offset and size, and PldmPackage.component_bytes() returns a zero-copy view of the buffer
the package was parsed from.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntFlag

from lockstep_common.pldm.descriptors import (
    DescriptorType,
    DescriptorValue,
    decode_value,
    descriptor_name,
    encode_value,
)
from lockstep_common.pldm.header import PackageHeader
from lockstep_common.pldm.strings import PldmString


class ComponentOptions(IntFlag):
    """ComponentOptions bits (DSP0267 "Component Image Information")."""

    FORCE_UPDATE = 1 << 0
    USE_COMPARISON_STAMP = 1 << 1


class ActivationMethod(IntFlag):
    """RequestedComponentActivationMethod bits (DSP0267 "Component Image Information")."""

    AUTOMATIC = 1 << 0
    SELF_CONTAINED = 1 << 1
    MEDIUM_SPECIFIC_RESET = 1 << 2
    SYSTEM_REBOOT = 1 << 3
    DC_POWER_CYCLE = 1 << 4
    AC_POWER_CYCLE = 1 << 5


@dataclass(frozen=True, slots=True, kw_only=True)
class Descriptor:
    """One record descriptor (DSP0267 "Record Descriptors"); ``data`` is the raw DescriptorData."""

    type: int
    data: bytes
    offset: int = field(default=-1, compare=False)  # of the DescriptorType field
    vendor_title: PldmString | None = None  # only for VENDOR_DEFINED (0xFFFF)
    vendor_data: bytes | None = None  # VENDOR_DEFINED: the bytes after the title

    @property
    def name(self) -> str:
        """The DSP0267 name of the type."""
        return descriptor_name(self.type)

    @property
    def value(self) -> DescriptorValue:
        """Typed value where simple (see descriptors.decode_value), else the raw bytes."""
        return decode_value(self.type, self.data)


DescriptorLike = Descriptor | tuple[int, DescriptorValue]


@dataclass(frozen=True, slots=True, kw_only=True)
class _DeviceRecord:
    """Fields firmware and downstream device ID records share."""

    index: int
    offset: int  # of the RecordLength field
    update_option_flags: int
    applicable_components: tuple[int, ...]  # component indices whose bitmap bit is set
    applicable_components_bitmap: bytes
    descriptors: tuple[Descriptor, ...]
    package_data: bytes
    reference_manifest_data: bytes | None  # None before format revision 1.3


@dataclass(frozen=True, slots=True, kw_only=True)
class FirmwareDeviceRecord(_DeviceRecord):
    """A firmware device ID record (DSP0267 "Firmware Device ID Record").

    ``update_option_flags`` bit 0 asks the UA to continue component updates after a failure.
    """

    component_image_set_version: PldmString


@dataclass(frozen=True, slots=True, kw_only=True)
class DownstreamDeviceRecord(_DeviceRecord):
    """A downstream device ID record (DSP0267 1.1+ "Downstream Device ID Record").

    ``update_option_flags`` bit 0 means the device supports self-contained activation; only
    then does the record carry the min version comparison stamp (else None). The min version
    string is None when absent (string type 0, length 0), as tools write it without bit 0.
    """

    self_contained_activation_min_version: PldmString | None
    self_contained_activation_min_comparison_stamp: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentImage:
    """One component image information entry (DSP0267 "Component Image Information")."""

    index: int
    offset_in_header: int  # of the ComponentClassification field
    classification: int
    identifier: int
    comparison_stamp: int  # 0xFFFFFFFF when unused
    options: ComponentOptions
    requested_activation_method: ActivationMethod
    location_offset: int  # ComponentLocationOffset: image start, from the start of the file
    size: int
    version: PldmString
    opaque_data: bytes | None  # None before format revision 1.2


def descriptor_key(descriptor: DescriptorLike) -> tuple[int, bytes]:
    """(type, raw data) of a Descriptor or of a (type, value) pair, for comparisons."""
    if isinstance(descriptor, Descriptor):
        return descriptor.type, descriptor.data
    descriptor_type, value = descriptor
    return descriptor_type, encode_value(descriptor_type, value)


def _matches(record: _DeviceRecord, device: frozenset[tuple[int, bytes]], partial: bool) -> bool:
    keys = {descriptor_key(d) for d in record.descriptors}
    if not partial:
        return keys <= device
    # Partial knowledge: nothing the caller knows may contradict the record, and at least one
    # descriptor must agree, so a record sharing no type with the caller never matches.
    asked = {t for t, _ in device}
    relevant = {k for k in keys if k[0] in asked}
    return bool(relevant) and relevant <= device


@dataclass(frozen=True, slots=True, kw_only=True)
class PldmPackage:
    """A parsed package; ``data`` is a view of the caller's buffer (keep it unchanged)."""

    header: PackageHeader
    device_records: tuple[FirmwareDeviceRecord, ...]
    downstream_records: tuple[DownstreamDeviceRecord, ...]  # empty before format revision 1.1
    components: tuple[ComponentImage, ...]
    data: memoryview = field(repr=False, compare=False)

    def component_bytes(self, component: ComponentImage | int) -> memoryview:
        """A zero-copy view of a component's image bytes.

        DSP0267 up to 1.3 defines no per-component hash to check them against: the only
        image integrity field is the 1.3 PackagePayloadChecksum, which parse_package verifies.
        """
        image = self.components[component] if isinstance(component, int) else component
        return self.data[image.location_offset : image.location_offset + image.size]

    def components_for(
        self, record: FirmwareDeviceRecord | DownstreamDeviceRecord
    ) -> tuple[ComponentImage, ...]:
        """The components whose bit is set in the record's ApplicableComponents bitmap."""
        return tuple(self.components[i] for i in record.applicable_components)

    def matching_records(
        self, device_descriptors: Iterable[DescriptorLike], *, partial: bool = False
    ) -> tuple[FirmwareDeviceRecord, ...]:
        """Firmware device ID records that apply to a device.

        ``device_descriptors`` are what the device reports (QueryDeviceIdentifiers), as
        Descriptor objects or (type, value) pairs such as ``(DescriptorType.PCI_VENDOR_ID,
        0x10DE)``. Descriptors compare on type and exact data bytes; a vendor-defined one
        compares title and data.

        Args:
            device_descriptors: The device's descriptors.
            partial: False (how a UA matches a record against QueryDeviceIdentifiers): a
                record matches when every one of its descriptors is among the device's.
                True, for callers that know only some of the device's identifiers: record
                descriptors of types not given are ignored; a record matches when it has at
                least one descriptor of a given type and all its descriptors of the given
                types are among those given.

        Returns:
            The matching records in package order.

        Raises:
            ValueError: A (type, value) pair does not encode to its type's fixed length.
        """
        device = frozenset(descriptor_key(d) for d in device_descriptors)
        return tuple(r for r in self.device_records if _matches(r, device, partial))

    def matching_downstream_records(
        self, device_descriptors: Iterable[DescriptorLike], *, partial: bool = False
    ) -> tuple[DownstreamDeviceRecord, ...]:
        """Downstream device ID records that apply to a device; see matching_records."""
        device = frozenset(descriptor_key(d) for d in device_descriptors)
        return tuple(r for r in self.downstream_records if _matches(r, device, partial))


__all__ = [
    "ActivationMethod",
    "ComponentImage",
    "ComponentOptions",
    "Descriptor",
    "DescriptorLike",
    "DescriptorType",
    "DownstreamDeviceRecord",
    "FirmwareDeviceRecord",
    "PldmPackage",
]
