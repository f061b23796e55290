"""Firmware and downstream device ID records and their descriptors (DSP0267 1.0-1.3).

Record layout ("Firmware Device ID Record" table; "Downstream Device ID Record" from 1.1):
RecordLength(2) DescriptorCount(1) UpdateOptionFlags(4) VersionStringType(1)
VersionStringLength(1) PackageDataLength(2) [ReferenceManifestLength(4), 1.3]
ApplicableComponents(ComponentBitmapBitLength/8) VersionString
[MinVersionComparisonStamp(4), downstream records with flag bit 0 only]
RecordDescriptors PackageData [ReferenceManifestData, 1.3].
"""

from __future__ import annotations

from typing import NamedTuple

from lockstep_common.pldm._reader import Layout, Reader
from lockstep_common.pldm.descriptors import DESCRIPTOR_TYPES, DescriptorType
from lockstep_common.pldm.errors import PldmFormatError
from lockstep_common.pldm.header import FormatRevision
from lockstep_common.pldm.package import Descriptor, DownstreamDeviceRecord, FirmwareDeviceRecord

_RECORD_FIXED = 11  # RecordLength .. PackageDataLength


class _Head(NamedTuple):
    descriptor_count: int
    flags: int
    string_type: int
    string_length: int
    data_length: int
    manifest_length: int | None
    bitmap: bytes


class _Tail(NamedTuple):
    descriptors: tuple[Descriptor, ...]
    package_data: bytes
    manifest: bytes | None


def firmware_record(outer: Reader, layout: Layout, index: int) -> FirmwareDeviceRecord:
    """Parse firmware device ID record ``index`` at ``outer.pos`` and step past it."""
    label = f"firmware device record {index}"
    r, start = _record_reader(outer, label, layout)
    head = _head(r, label, layout)
    if head.string_length == 0:
        raise PldmFormatError(f"ComponentImageSetVersionString length of {label} is 0")
    what = f"ComponentImageSetVersionString of {label}"
    version = r.string(head.string_type, head.string_length, what)
    tail = _tail(r, label, head)
    return FirmwareDeviceRecord(
        index=index,
        offset=start,
        update_option_flags=head.flags,
        applicable_components=bits(head.bitmap),
        applicable_components_bitmap=head.bitmap,
        descriptors=tail.descriptors,
        package_data=tail.package_data,
        reference_manifest_data=tail.manifest,
        component_image_set_version=version,
    )


def downstream_record(outer: Reader, layout: Layout, index: int) -> DownstreamDeviceRecord:
    """Parse downstream device ID record ``index`` at ``outer.pos`` and step past it."""
    label = f"downstream device record {index}"
    r, start = _record_reader(outer, label, layout)
    head = _head(r, label, layout)
    # Without flag bit 0 (self-contained activation) the creator writes type 0, length 0:
    # no string. The comparison stamp field exists only with the flag.
    min_version = None
    if head.string_type or head.string_length:
        what = f"self-contained activation min version string of {label}"
        min_version = r.string(head.string_type, head.string_length, what)
    stamp = None
    if head.flags & 1:
        stamp = r.uint(4, f"min version comparison stamp of {label}")
    tail = _tail(r, label, head)
    return DownstreamDeviceRecord(
        index=index,
        offset=start,
        update_option_flags=head.flags,
        applicable_components=bits(head.bitmap),
        applicable_components_bitmap=head.bitmap,
        descriptors=tail.descriptors,
        package_data=tail.package_data,
        reference_manifest_data=tail.manifest,
        self_contained_activation_min_version=min_version,
        self_contained_activation_min_comparison_stamp=stamp,
    )


def bits(bitmap: bytes) -> tuple[int, ...]:
    """Indices of the set bits; bit 0 of byte 0 is component 0 (little-endian bitfield)."""
    return tuple(i for i in range(len(bitmap) * 8) if bitmap[i // 8] >> (i % 8) & 1)


def _record_reader(outer: Reader, label: str, layout: Layout) -> tuple[Reader, int]:
    """Consume one record from ``outer``; return a reader confined to it and its offset."""
    start = outer.pos
    length = outer.uint(2, f"RecordLength of {label}")
    fixed = _RECORD_FIXED + 4 * (layout.revision >= FormatRevision.V1_3) + layout.bitmap_bytes
    if length < fixed:
        raise PldmFormatError(
            f"RecordLength {length} of {label} at offset {start} is below the {fixed} bytes "
            "of its fixed fields and ApplicableComponents"
        )
    if length > outer.end - start:
        raise PldmFormatError(
            f"{label} at offset {start} (RecordLength {length}) runs past the end of "
            f"{outer.area} at offset {outer.end}"
        )
    outer.pos = start + length
    area = f"{label} (RecordLength {length} at offset {start})"
    return Reader(outer.buf, start + 2, start + length, area), start


def _head(r: Reader, label: str, layout: Layout) -> _Head:
    count = r.uint(1, f"DescriptorCount of {label}")
    if count == 0:
        raise PldmFormatError(f"DescriptorCount of {label} at offset {r.pos - 1} is 0")
    flags = r.uint(4, f"update option flags of {label}")
    string_type = r.uint(1, f"version string type of {label}")
    string_length = r.uint(1, f"version string length of {label}")
    data_length = r.uint(2, f"package data length of {label}")
    manifest_length = None
    if layout.revision >= FormatRevision.V1_3:
        manifest_length = r.uint(4, f"ReferenceManifestLength of {label}")
    bitmap = r.raw(layout.bitmap_bytes, f"ApplicableComponents of {label}")
    return _Head(count, flags, string_type, string_length, data_length, manifest_length, bitmap)


def _tail(r: Reader, label: str, head: _Head) -> _Tail:
    count = head.descriptor_count
    descriptors = tuple(_descriptor(r, f"descriptor {i} of {label}") for i in range(count))
    package_data = r.raw(head.data_length, f"package data of {label}")
    manifest = None
    if head.manifest_length is not None:
        manifest = r.raw(head.manifest_length, f"ReferenceManifestData of {label}")
    if r.pos != r.end:
        raise PldmFormatError(f"{r.area} disagrees with its fields, which end at offset {r.pos}")
    return _Tail(descriptors, package_data, manifest)


def _descriptor(r: Reader, what: str) -> Descriptor:
    # DescriptorType(2) DescriptorLength(2) DescriptorData; known types have fixed lengths.
    offset = r.pos
    kind = r.uint(2, f"DescriptorType of {what}")
    length = r.uint(2, f"DescriptorLength of {what}")
    data_at = r.pos
    data = r.raw(length, f"DescriptorData of {what}")
    if kind == DescriptorType.VENDOR_DEFINED:
        return _vendor_descriptor(Reader(r.buf, data_at, r.pos, f"DescriptorData of {what}"), what)
    info = DESCRIPTOR_TYPES.get(kind)
    if info is not None and length != info.length:
        raise PldmFormatError(
            f"{what} ({info.name}) at offset {offset} has DescriptorLength {length}, "
            f"expected {info.length}"
        )
    return Descriptor(type=kind, data=data, offset=offset)


def _vendor_descriptor(v: Reader, what: str) -> Descriptor:
    # Vendor defined (0xFFFF): TitleStringType(1) TitleStringLength(1) TitleString, then data.
    data = bytes(v.buf[v.pos : v.end])
    offset = v.pos - 4
    type_code = v.uint(1, f"vendor title string type of {what}")
    length = v.uint(1, f"vendor title string length of {what}")
    title = v.string(type_code, length, f"vendor title string of {what}")
    return Descriptor(
        type=DescriptorType.VENDOR_DEFINED,
        data=data,
        offset=offset,
        vendor_title=title,
        vendor_data=bytes(v.buf[v.pos : v.end]),
    )
