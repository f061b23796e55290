"""Build PLDM firmware update packages (DSP0267 1.0-1.3), for fixtures and simulators.

The inverse of parse_package: ``parse_package(build_package(...))`` round-trips. Images are
laid out back to back right after the header, in component order, as openbmc's
pldm_fwup_pkg_creator.py does; both CRC-32 checksums are computed.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from lockstep_common.pldm.descriptors import DescriptorType, DescriptorValue, encode_value
from lockstep_common.pldm.header import FormatRevision, Timestamp104
from lockstep_common.pldm.strings import StringType, encode_string


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentSpec:
    """One component: its image and its component image information fields."""

    image: bytes
    identifier: int
    version: str
    classification: int = 0x000A  # Firmware
    comparison_stamp: int = 0xFFFFFFFF  # "not used"
    options: int = 0
    requested_activation_method: int = 0
    opaque_data: bytes = b""  # 1.2+ only
    version_type: StringType = StringType.ASCII


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordSpec:
    """A firmware or downstream device ID record.

    ``version`` is the ComponentImageSetVersionString of a firmware device record, or the
    self-contained activation min version string of a downstream record (None writes string
    type 0 with length 0, as openbmc's creator does). ``min_comparison_stamp`` is written
    only for downstream records with ``update_option_flags`` bit 0 set.
    """

    descriptors: Sequence[tuple[int, DescriptorValue]]
    applicable_components: Sequence[int]
    version: str | None
    update_option_flags: int = 0
    package_data: bytes = b""
    reference_manifest_data: bytes = b""  # 1.3+ only
    min_comparison_stamp: int = 0
    version_type: StringType = StringType.ASCII


def vendor_defined_descriptor(
    title: str, data: bytes, title_type: StringType = StringType.ASCII
) -> tuple[int, bytes]:
    """A vendor-defined (0xFFFF) descriptor: title string type, length, string, then data."""
    raw_title = encode_string(title, title_type)
    return DescriptorType.VENDOR_DEFINED, bytes((title_type, len(raw_title))) + raw_title + data


def build_package(
    *,
    revision: FormatRevision,
    version: str,
    release_time: datetime | Timestamp104,
    components: Sequence[ComponentSpec],
    device_records: Sequence[RecordSpec],
    downstream_records: Sequence[RecordSpec] = (),
    version_type: StringType = StringType.ASCII,
) -> bytes:
    """Build a complete package.

    Args:
        revision: Header format revision; decides which optional fields are written.
        version: PackageVersionString.
        release_time: PackageReleaseDateTime.
        components: Component images in package order (their bitmap bit is their index).
        device_records: Firmware device ID records (at least the initial descriptor each).
        downstream_records: Downstream device ID records (1.1+).
        version_type: String type of PackageVersionString.

    Returns:
        The package bytes.

    Raises:
        ValueError: A field does not fit its width or the revision lacks a requested feature.
    """
    if not version:
        raise ValueError("PackageVersionString must not be empty")
    _check_features(revision, components, device_records, downstream_records)
    bitmap_bytes = (len(components) + 7) // 8
    raw_version = encode_string(version, version_type)
    if isinstance(release_time, datetime):
        release_time = Timestamp104.from_datetime(release_time)
    body = bytes((len(device_records),)) + b"".join(
        _record(r, revision, bitmap_bytes, downstream=False) for r in device_records
    )
    if revision >= FormatRevision.V1_1:
        body += bytes((len(downstream_records),)) + b"".join(
            _record(r, revision, bitmap_bytes, downstream=True) for r in downstream_records
        )
    fixed = 16 + 1 + 2 + 13 + 2 + 2 + len(raw_version)
    entries_size = len(_component_area(components, revision, 0))
    header_size = fixed + len(body) + entries_size + 4 * revision.checksum_count
    header = (
        revision.identifier.bytes
        + _pack("<BH", revision, header_size)
        + release_time.to_bytes()
        + _pack("<HBB", bitmap_bytes * 8, version_type, len(raw_version))
        + raw_version
        + body
        + _component_area(components, revision, header_size)
    )
    header += _pack("<I", zlib.crc32(header))
    payload = b"".join(c.image for c in components)
    if revision >= FormatRevision.V1_3:
        header += _pack("<I", zlib.crc32(payload))
    return header + payload


def _check_features(
    revision: FormatRevision,
    components: Sequence[ComponentSpec],
    device_records: Sequence[RecordSpec],
    downstream_records: Sequence[RecordSpec],
) -> None:
    if len(device_records) > 255 or len(downstream_records) > 255:
        raise ValueError("at most 255 records per identification area")
    if downstream_records and revision < FormatRevision.V1_1:
        raise ValueError("downstream device records need format revision 1.1 or later")
    if any(c.opaque_data for c in components) and revision < FormatRevision.V1_2:
        raise ValueError("ComponentOpaqueData needs format revision 1.2 or later")
    records = (*device_records, *downstream_records)
    if any(r.reference_manifest_data for r in records) and revision < FormatRevision.V1_3:
        raise ValueError("ReferenceManifestData needs format revision 1.3 or later")
    if not all(r.descriptors for r in records):
        raise ValueError("every device ID record needs at least one descriptor")
    # Parsers (libpldm's and ours) reject empty version strings, so never write one.
    if not all(r.version for r in device_records) or not all(c.version for c in components):
        raise ValueError("component image set and component version strings must not be empty")


def _pack(fmt: str, *values: int) -> bytes:
    try:
        return struct.pack(fmt, *values)
    except struct.error as exc:  # out-of-range value: report it as the ValueError it is
        raise ValueError(f"a field value does not fit its width: {exc}") from None


def _bitmap(indices: Sequence[int], size: int) -> bytes:
    bitmap = bytearray(size)
    for index in indices:
        if not 0 <= index < size * 8:
            raise ValueError(f"applicable component {index} does not exist")
        bitmap[index // 8] |= 1 << (index % 8)
    return bytes(bitmap)


def _record(
    spec: RecordSpec, revision: FormatRevision, bitmap_bytes: int, *, downstream: bool
) -> bytes:
    descriptors = b"".join(
        _pack("<HH", kind, len(data)) + data
        for kind, data in ((k, encode_value(k, v)) for k, v in spec.descriptors)
    )
    version = b"" if spec.version is None else encode_string(spec.version, spec.version_type)
    string_type = 0 if spec.version is None else spec.version_type
    fields = _pack(
        "<BIBBH",
        len(spec.descriptors),
        spec.update_option_flags,
        string_type,
        len(version),
        len(spec.package_data),
    )
    if revision >= FormatRevision.V1_3:
        fields += _pack("<I", len(spec.reference_manifest_data))
    fields += _bitmap(spec.applicable_components, bitmap_bytes) + version
    if downstream and spec.update_option_flags & 1:
        fields += _pack("<I", spec.min_comparison_stamp)
    fields += descriptors + spec.package_data + spec.reference_manifest_data
    if len(fields) + 2 > 0xFFFF:
        raise ValueError(f"record of {len(fields) + 2} bytes exceeds RecordLength's 65535")
    return _pack("<H", len(fields) + 2) + fields


def _component_area(
    components: Sequence[ComponentSpec], revision: FormatRevision, first_image_at: int
) -> bytes:
    area = _pack("<H", len(components))
    offset = first_image_at
    for c in components:
        version = encode_string(c.version, c.version_type)
        area += _pack(
            "<HHIHHIIBB",
            c.classification,
            c.identifier,
            c.comparison_stamp,
            c.options,
            c.requested_activation_method,
            offset,
            len(c.image),
            c.version_type,
            len(version),
        )
        area += version
        if revision >= FormatRevision.V1_2:
            area += _pack("<I", len(c.opaque_data)) + c.opaque_data
        offset += len(c.image)
    return area
