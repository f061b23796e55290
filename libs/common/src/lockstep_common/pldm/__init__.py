"""PLDM for Firmware Update (DMTF DSP0267) package parsing and building.

``parse_package`` / ``parse_package_file`` read header format revisions 1.0 to 1.3 into frozen
dataclasses, verify the CRC-32 checksums and reject any malformed input with
``PldmFormatError``. ``build_package`` writes packages for fixtures and simulators.
"""

from lockstep_common.pldm.builder import (
    ComponentSpec,
    RecordSpec,
    build_package,
    vendor_defined_descriptor,
)
from lockstep_common.pldm.descriptors import (
    DESCRIPTOR_TYPES,
    INITIAL_DESCRIPTOR_TYPES,
    DescriptorInfo,
    DescriptorType,
    DescriptorValue,
    ValueKind,
)
from lockstep_common.pldm.errors import PldmFormatError
from lockstep_common.pldm.header import (
    PACKAGE_HEADER_IDENTIFIERS,
    FormatRevision,
    PackageHeader,
    Timestamp104,
)
from lockstep_common.pldm.package import (
    ActivationMethod,
    ComponentImage,
    ComponentOptions,
    Descriptor,
    DescriptorLike,
    DownstreamDeviceRecord,
    FirmwareDeviceRecord,
    PldmPackage,
)
from lockstep_common.pldm.parser import parse_package, parse_package_file
from lockstep_common.pldm.strings import PldmString, StringType

__all__ = [
    "DESCRIPTOR_TYPES",
    "INITIAL_DESCRIPTOR_TYPES",
    "PACKAGE_HEADER_IDENTIFIERS",
    "ActivationMethod",
    "ComponentImage",
    "ComponentOptions",
    "ComponentSpec",
    "Descriptor",
    "DescriptorInfo",
    "DescriptorLike",
    "DescriptorType",
    "DescriptorValue",
    "DownstreamDeviceRecord",
    "FirmwareDeviceRecord",
    "FormatRevision",
    "PackageHeader",
    "PldmFormatError",
    "PldmPackage",
    "PldmString",
    "RecordSpec",
    "StringType",
    "Timestamp104",
    "ValueKind",
    "build_package",
    "parse_package",
    "parse_package_file",
    "vendor_defined_descriptor",
]
