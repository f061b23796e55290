"""Device identification descriptors (DSP0267, "Descriptor Identifier" table).

A firmware device ID record names the devices it applies to with a list of (type, length,
data) descriptors. This module knows the defined types, their fixed lengths and how to turn
the data into a convenient Python value. Multi-byte integers are little-endian like every
other PLDM field; the openbmc example encodes NVIDIA's IANA number 5703 as ``47 16 00 00``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum
from types import MappingProxyType


class DescriptorType(IntEnum):
    """Descriptor type codes (DSP0267 "Descriptor Identifier" table)."""

    PCI_VENDOR_ID = 0x0000
    IANA_ENTERPRISE_ID = 0x0001
    UUID = 0x0002
    PNP_VENDOR_ID = 0x0003
    ACPI_VENDOR_ID = 0x0004
    IEEE_ASSIGNED_COMPANY_ID = 0x0005
    SCSI_VENDOR_ID = 0x0006
    PCI_DEVICE_ID = 0x0100
    PCI_SUBSYSTEM_VENDOR_ID = 0x0101
    PCI_SUBSYSTEM_ID = 0x0102
    PCI_REVISION_ID = 0x0103
    PNP_PRODUCT_IDENTIFIER = 0x0104
    ACPI_PRODUCT_IDENTIFIER = 0x0105
    ASCII_MODEL_NUMBER_LONG = 0x0106
    ASCII_MODEL_NUMBER_SHORT = 0x0107
    SCSI_PRODUCT_ID = 0x0108
    UBM_CONTROLLER_DEVICE_CODE = 0x0109
    IEEE_EUI_64_ID = 0x010A
    PCI_REVISION_ID_RANGE = 0x010B
    VENDOR_DEFINED = 0xFFFF


class ValueKind(Enum):
    """How a descriptor's data is presented as a Python value."""

    INT = "int"  # little-endian unsigned integer
    UUID = "uuid"  # 16 bytes in the order written (RFC 4122 network order)
    ASCII = "ascii"  # fixed-width ASCII text
    BYTES = "bytes"  # no simpler form: the raw bytes


@dataclass(frozen=True, slots=True)
class DescriptorInfo:
    """What DSP0267 says about one descriptor type."""

    name: str
    length: int
    kind: ValueKind


_T = DescriptorType
_K = ValueKind
DESCRIPTOR_TYPES: Mapping[int, DescriptorInfo] = MappingProxyType(
    {
        _T.PCI_VENDOR_ID: DescriptorInfo("PCI Vendor ID", 2, _K.INT),
        _T.IANA_ENTERPRISE_ID: DescriptorInfo("IANA Enterprise ID", 4, _K.INT),
        _T.UUID: DescriptorInfo("UUID", 16, _K.UUID),
        _T.PNP_VENDOR_ID: DescriptorInfo("PnP Vendor ID", 3, _K.ASCII),
        _T.ACPI_VENDOR_ID: DescriptorInfo("ACPI Vendor ID", 4, _K.ASCII),
        _T.IEEE_ASSIGNED_COMPANY_ID: DescriptorInfo("IEEE Assigned Company ID", 3, _K.BYTES),
        _T.SCSI_VENDOR_ID: DescriptorInfo("SCSI Vendor ID", 8, _K.ASCII),
        _T.PCI_DEVICE_ID: DescriptorInfo("PCI Device ID", 2, _K.INT),
        _T.PCI_SUBSYSTEM_VENDOR_ID: DescriptorInfo("PCI Subsystem Vendor ID", 2, _K.INT),
        _T.PCI_SUBSYSTEM_ID: DescriptorInfo("PCI Subsystem ID", 2, _K.INT),
        _T.PCI_REVISION_ID: DescriptorInfo("PCI Revision ID", 1, _K.INT),
        _T.PNP_PRODUCT_IDENTIFIER: DescriptorInfo("PnP Product Identifier", 4, _K.BYTES),
        _T.ACPI_PRODUCT_IDENTIFIER: DescriptorInfo("ACPI Product Identifier", 4, _K.BYTES),
        _T.ASCII_MODEL_NUMBER_LONG: DescriptorInfo(
            "ASCII Model Number (Long String)", 40, _K.ASCII
        ),
        _T.ASCII_MODEL_NUMBER_SHORT: DescriptorInfo(
            "ASCII Model Number (Short String)", 10, _K.ASCII
        ),
        _T.SCSI_PRODUCT_ID: DescriptorInfo("SCSI Product ID", 16, _K.ASCII),
        _T.UBM_CONTROLLER_DEVICE_CODE: DescriptorInfo("UBM Controller Device Code", 4, _K.BYTES),
        _T.IEEE_EUI_64_ID: DescriptorInfo("IEEE EUI-64 ID", 8, _K.BYTES),
        _T.PCI_REVISION_ID_RANGE: DescriptorInfo("PCI Revision ID Range", 2, _K.BYTES),
    }
)

# DSP0267 requires the first descriptor of a firmware device ID record to be one of these.
INITIAL_DESCRIPTOR_TYPES = frozenset(range(0x0000, 0x0005))

DescriptorValue = int | uuid.UUID | str | bytes


def descriptor_name(descriptor_type: int) -> str:
    """The DSP0267 name of a descriptor type, or ``"Unknown (0x....)"``."""
    if descriptor_type == DescriptorType.VENDOR_DEFINED:
        return "Vendor Defined"
    info = DESCRIPTOR_TYPES.get(descriptor_type)
    return info.name if info else f"Unknown (0x{descriptor_type:04X})"


def decode_value(descriptor_type: int, data: bytes) -> DescriptorValue:
    """The simplest faithful Python value for a descriptor's data.

    PCI IDs and the IANA number become ``int``, a UUID becomes ``uuid.UUID``, fixed-width
    ASCII identifiers become ``str`` (trailing NUL and space padding removed); everything
    else, including vendor-defined and unknown types, stays ``bytes``.
    """
    info = DESCRIPTOR_TYPES.get(descriptor_type)
    if info is None or len(data) != info.length:
        return data
    if info.kind is ValueKind.INT:
        return int.from_bytes(data, "little")
    if info.kind is ValueKind.UUID:
        return uuid.UUID(bytes=data)
    if info.kind is ValueKind.ASCII and data.isascii():
        return data.decode("ascii").rstrip("\x00 ")
    return data


def encode_value(descriptor_type: int, value: DescriptorValue) -> bytes:
    """Encode a value as the descriptor data of ``descriptor_type`` (inverse of decode_value).

    ``bytes`` are taken as-is; ``str`` is ASCII padded with NULs to the fixed width.

    Raises:
        ValueError: The value does not fit the type's fixed length, or its Python type does
            not suit the descriptor type.
    """
    info = DESCRIPTOR_TYPES.get(descriptor_type)
    if isinstance(value, bytes):
        data = value
    elif info is None:
        raise ValueError(f"descriptor type 0x{descriptor_type:04X} takes bytes, not {value!r}")
    elif isinstance(value, uuid.UUID):
        data = value.bytes
    elif isinstance(value, int):
        if not 0 <= value < 1 << (8 * info.length):
            raise ValueError(f"{info.name} {value} does not fit in {info.length} bytes")
        data = value.to_bytes(info.length, "little")
    else:
        data = value.encode("ascii").ljust(info.length, b"\x00")
    if info is not None and len(data) != info.length:
        raise ValueError(f"{info.name} data must be {info.length} bytes, got {len(data)}")
    return data
