"""Parse PLDM firmware update packages, DSP0267 header format revisions 1.0 to 1.3.

Layout (DSP0267 Table 3 and following; all integers little-endian): package header
information, firmware device identification area, downstream device identification area
(1.1+), component image information area, PackageHeaderChecksum, PackagePayloadChecksum
(1.3 only), then the component images at the offsets the header gives.

Every read is bounds-checked against the area it belongs to, so malformed input raises
PldmFormatError naming the field and its byte offset. Loops run over one- or two-byte counts
and bytes are copied only from inside the header (at most 64 KiB): a length field can never
cause a large allocation. Component images are not copied.
"""

from __future__ import annotations

import mmap
import os
import uuid
import zlib
from dataclasses import dataclass

from lockstep_common.pldm.descriptors import DESCRIPTOR_TYPES, DescriptorType
from lockstep_common.pldm.errors import PldmFormatError
from lockstep_common.pldm.package import (
    PACKAGE_HEADER_IDENTIFIERS,
    ActivationMethod,
    ComponentImage,
    ComponentOptions,
    Descriptor,
    DownstreamDeviceRecord,
    FirmwareDeviceRecord,
    FormatRevision,
    PackageHeader,
    PldmPackage,
    Timestamp104,
)
from lockstep_common.pldm.strings import PldmString, decode_string

_FIXED_HEADER = 36  # PackageHeaderIdentifier .. PackageVersionStringLength (Table 3)
_RECORD_FIXED = 11  # RecordLength .. PackageDataLength (Tables 4 and 6)


class _Reader:
    """Bounds-checked little-endian reads from [pos, end) of the package buffer."""

    __slots__ = ("area", "buf", "end", "pos")

    def __init__(self, buf: memoryview, pos: int, end: int, area: str) -> None:
        self.buf, self.pos, self.end, self.area = buf, pos, end, area

    def take(self, size: int, what: str) -> memoryview:
        if size > self.end - self.pos:
            raise PldmFormatError(
                f"truncated {what}: needs {size} bytes at offset {self.pos}, "
                f"but {self.area} ends at offset {self.end}"
            )
        self.pos += size
        return self.buf[self.pos - size : self.pos]

    def uint(self, size: int, what: str) -> int:
        return int.from_bytes(self.take(size, what), "little")

    def raw(self, size: int, what: str) -> bytes:
        return bytes(self.take(size, what))

    def string(self, type_code: int, length: int, what: str) -> PldmString:
        offset = self.pos
        return decode_string(type_code, self.raw(length, what), what, offset)

    def version(self, what: str) -> PldmString:
        """A type byte, a length byte and a non-empty string, back to back."""
        type_code = self.uint(1, f"{what} type")
        length = self.uint(1, f"{what} length")
        if length == 0:
            # libpldm rejects empty version strings too; a UA could not report the version.
            raise PldmFormatError(f"{what} length at offset {self.pos - 1} is 0")
        return self.string(type_code, length, what)


@dataclass(frozen=True, slots=True)
class _Layout:
    revision: FormatRevision
    bitmap_bytes: int


def parse_package(
    data: bytes | bytearray | memoryview, *, verify_checksums: bool = True
) -> PldmPackage:
    """Parse a PLDM firmware update package held in memory.

    Args:
        data: The whole package file. The result keeps a view of it, so do not modify it.
        verify_checksums: Check PackageHeaderChecksum and, for 1.3, PackagePayloadChecksum
            (CRC-32, IEEE 802.3). Turn off only to inspect a damaged package.

    Returns:
        The parsed package.

    Raises:
        PldmFormatError: The package is malformed; the message names the field and offset.
    """
    view = memoryview(data).cast("B")
    reader = _Reader(view, 0, len(view), "the file")
    revision = _read_identification(reader)
    header_size = reader.uint(2, "PackageHeaderSize")
    checksums_at = _check_header_size(header_size, revision, len(view))
    if verify_checksums:
        _verify_checksums(view, revision, header_size, checksums_at)
    reader.end, reader.area = checksums_at, "the package header (per PackageHeaderSize)"
    release = Timestamp104.from_bytes(reader.raw(13, "PackageReleaseDateTime"))
    bit_length = reader.uint(2, "ComponentBitmapBitLength")
    if bit_length % 8:
        raise PldmFormatError(
            f"ComponentBitmapBitLength {bit_length} at offset 32 is not a multiple of 8"
        )
    version = reader.version("PackageVersionString")
    layout = _Layout(revision, bit_length // 8)
    devices = tuple(
        _firmware_record(reader, layout, i) for i in range(reader.uint(1, "DeviceIDRecordCount"))
    )
    downstream: tuple[DownstreamDeviceRecord, ...] = ()
    if revision >= FormatRevision.V1_1:
        count = reader.uint(1, "DownstreamDeviceIDRecordCount")
        downstream = tuple(_downstream_record(reader, layout, i) for i in range(count))
    components = _components(reader, revision, header_size, len(view))
    if reader.pos != checksums_at:
        raise PldmFormatError(
            f"PackageHeaderSize {header_size} at offset 17 puts PackageHeaderChecksum at offset "
            f"{checksums_at}, but the component image information area ends at offset {reader.pos}"
        )
    _check_bitmaps(bit_length, (*devices, *downstream), len(components))
    _check_overlaps(components)
    header = PackageHeader(
        identifier=revision.identifier,
        format_revision=revision,
        header_size=header_size,
        release_time=release,
        component_bitmap_bit_length=bit_length,
        version=version,
        header_checksum=int.from_bytes(view[checksums_at : checksums_at + 4], "little"),
        payload_checksum=_payload_checksum(view, revision, checksums_at),
    )
    return PldmPackage(
        header=header,
        device_records=devices,
        downstream_records=downstream,
        components=components,
        data=view,
    )


def parse_package_file(
    path: str | os.PathLike[str], *, verify_checksums: bool = True
) -> PldmPackage:
    """Parse a package file, memory-mapped read-only so large images are never read into RAM.

    Raises:
        PldmFormatError: The package is malformed.
        OSError: The file cannot be opened or mapped.
    """
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            return parse_package(b"", verify_checksums=verify_checksums)
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    return parse_package(memoryview(mapped), verify_checksums=verify_checksums)


def _read_identification(reader: _Reader) -> FormatRevision:
    identifier = uuid.UUID(bytes=reader.raw(16, "PackageHeaderIdentifier"))
    revision = PACKAGE_HEADER_IDENTIFIERS.get(identifier)
    if revision is None:
        raise PldmFormatError(
            f"unknown PackageHeaderIdentifier {identifier} at offset 0: "
            "not a DSP0267 1.0-1.3 firmware update package"
        )
    stored = reader.uint(1, "PackageHeaderFormatRevision")
    if stored != revision:
        raise PldmFormatError(
            f"PackageHeaderFormatRevision {stored} at offset 16 does not match "
            f"PackageHeaderIdentifier {identifier}, which announces revision {int(revision)}"
        )
    return revision


def _check_header_size(header_size: int, revision: FormatRevision, file_size: int) -> int:
    # Fixed fields, the three area counts (no downstream count in 1.0) and the checksums.
    checksum_bytes = 4 * revision.checksum_count
    minimum = _FIXED_HEADER + 3 + (revision >= FormatRevision.V1_1) + checksum_bytes
    if header_size < minimum:
        raise PldmFormatError(
            f"PackageHeaderSize {header_size} at offset 17 is below the {minimum} bytes "
            f"a revision {int(revision)} header needs"
        )
    if header_size > file_size:
        raise PldmFormatError(
            f"PackageHeaderSize {header_size} at offset 17 exceeds the file size {file_size}"
        )
    return header_size - checksum_bytes


def _verify_checksums(
    view: memoryview, revision: FormatRevision, header_size: int, checksums_at: int
) -> None:
    stored = int.from_bytes(view[checksums_at : checksums_at + 4], "little")
    computed = zlib.crc32(view[:checksums_at])
    if stored != computed:
        raise PldmFormatError(
            f"header checksum mismatch: PackageHeaderChecksum at offset {checksums_at} stores "
            f"0x{stored:08x}, computed 0x{computed:08x} over offsets 0-{checksums_at - 1}"
        )
    payload = _payload_checksum(view, revision, checksums_at)
    if payload is None:
        return
    # DSP0267 1.3: the CRC starts right after this field, i.e. at PackageHeaderSize, and runs
    # to the end of the file, so it covers every image and any padding between them.
    computed = zlib.crc32(view[header_size:])
    if payload != computed:
        raise PldmFormatError(
            f"payload checksum mismatch: PackagePayloadChecksum at offset {checksums_at + 4} "
            f"stores 0x{payload:08x}, computed 0x{computed:08x} over offsets "
            f"{header_size}-{len(view) - 1}"
        )


def _payload_checksum(view: memoryview, revision: FormatRevision, checksums_at: int) -> int | None:
    if revision < FormatRevision.V1_3:
        return None
    return int.from_bytes(view[checksums_at + 4 : checksums_at + 8], "little")


def _record_reader(outer: _Reader, label: str, layout: _Layout) -> tuple[_Reader, int]:
    """Consume one ID record from ``outer`` and return a reader confined to it."""
    start = outer.pos
    length = outer.uint(2, f"RecordLength of {label}")
    fixed = _RECORD_FIXED + 4 * (layout.revision >= FormatRevision.V1_3) + layout.bitmap_bytes
    if length < fixed:
        raise PldmFormatError(
            f"RecordLength {length} of {label} at offset {start} is below its {fixed} fixed bytes"
        )
    if length > outer.end - start:
        raise PldmFormatError(
            f"{label} at offset {start} (RecordLength {length}) runs past the end of "
            f"{outer.area} at offset {outer.end}"
        )
    outer.pos = start + length
    area = f"{label} (RecordLength {length} at offset {start})"
    return _Reader(outer.buf, start + 2, start + length, area), start


def _record_tail(
    r: _Reader, label: str, count: int, data_len: int, manifest_len: int | None
) -> tuple[tuple[Descriptor, ...], bytes, bytes | None]:
    """RecordDescriptors, PackageData and (1.3) ReferenceManifestData, which end a record."""
    descriptors = tuple(_descriptor(r, f"descriptor {i} of {label}") for i in range(count))
    package_data = r.raw(data_len, f"package data of {label}")
    manifest = (
        None if manifest_len is None else r.raw(manifest_len, f"ReferenceManifestData of {label}")
    )
    if r.pos != r.end:
        raise PldmFormatError(f"{r.area} disagrees with its fields, which end at offset {r.pos}")
    return descriptors, package_data, manifest


def _record_head(
    r: _Reader, label: str, layout: _Layout
) -> tuple[int, int, int, int, int, int | None, bytes]:
    """DescriptorCount .. ApplicableComponents: the fields every ID record starts with."""
    count = r.uint(1, f"DescriptorCount of {label}")
    if count == 0:
        raise PldmFormatError(f"DescriptorCount of {label} at offset {r.pos - 1} is 0")
    flags = r.uint(4, f"update option flags of {label}")
    type_code = r.uint(1, f"version string type of {label}")
    str_len = r.uint(1, f"version string length of {label}")
    data_len = r.uint(2, f"package data length of {label}")
    manifest_len = None
    if layout.revision >= FormatRevision.V1_3:
        manifest_len = r.uint(4, f"ReferenceManifestLength of {label}")
    bitmap = r.raw(layout.bitmap_bytes, f"ApplicableComponents of {label}")
    return count, flags, type_code, str_len, data_len, manifest_len, bitmap


def _firmware_record(outer: _Reader, layout: _Layout, index: int) -> FirmwareDeviceRecord:
    # DSP0267 Table 4 (1.3 inserts ReferenceManifestLength and ReferenceManifestData).
    label = f"firmware device record {index}"
    r, start = _record_reader(outer, label, layout)
    count, flags, type_code, str_len, data_len, manifest_len, bitmap = _record_head(
        r, label, layout
    )
    if str_len == 0:
        raise PldmFormatError(f"ComponentImageSetVersionString length of {label} is 0")
    version = r.string(type_code, str_len, f"ComponentImageSetVersionString of {label}")
    descriptors, package_data, manifest = _record_tail(r, label, count, data_len, manifest_len)
    return FirmwareDeviceRecord(
        index=index,
        offset=start,
        update_option_flags=flags,
        applicable_components=_bits(bitmap),
        applicable_components_bitmap=bitmap,
        descriptors=descriptors,
        package_data=package_data,
        reference_manifest_data=manifest,
        component_image_set_version=version,
    )


def _downstream_record(outer: _Reader, layout: _Layout, index: int) -> DownstreamDeviceRecord:
    # DSP0267 1.1+ Table 6. The min version comparison stamp exists only when flags bit 0
    # (self-contained activation supported) is set; tools write string type 0, length 0 else.
    label = f"downstream device record {index}"
    r, start = _record_reader(outer, label, layout)
    count, flags, type_code, str_len, data_len, manifest_len, bitmap = _record_head(
        r, label, layout
    )
    what = f"self-contained activation min version string of {label}"
    min_version = None
    if type_code or str_len:
        min_version = r.string(type_code, str_len, what)
    stamp = r.uint(4, f"min version comparison stamp of {label}") if flags & 1 else None
    descriptors, package_data, manifest = _record_tail(r, label, count, data_len, manifest_len)
    return DownstreamDeviceRecord(
        index=index,
        offset=start,
        update_option_flags=flags,
        applicable_components=_bits(bitmap),
        applicable_components_bitmap=bitmap,
        descriptors=descriptors,
        package_data=package_data,
        reference_manifest_data=manifest,
        self_contained_activation_min_version=min_version,
        self_contained_activation_min_comparison_stamp=stamp,
    )


def _descriptor(r: _Reader, what: str) -> Descriptor:
    # DSP0267 Table 7: DescriptorType, DescriptorLength, DescriptorData.
    offset = r.pos
    kind = r.uint(2, f"DescriptorType of {what}")
    length = r.uint(2, f"DescriptorLength of {what}")
    data_at = r.pos
    data = r.raw(length, f"DescriptorData of {what}")
    if kind == DescriptorType.VENDOR_DEFINED:
        # Vendor defined: DescriptorTitleStringType, ...Length, ...String, then the data.
        v = _Reader(r.buf, data_at, data_at + length, f"DescriptorData of {what}")
        type_code = v.uint(1, f"vendor title string type of {what}")
        title = v.string(
            type_code, v.uint(1, f"vendor title length of {what}"), f"vendor title of {what}"
        )
        return Descriptor(
            type=kind,
            data=data,
            offset=offset,
            vendor_title=title,
            vendor_data=data[v.pos - data_at :],
        )
    info = DESCRIPTOR_TYPES.get(kind)
    if info is not None and length != info.length:
        raise PldmFormatError(
            f"{what} ({info.name}) at offset {offset} has DescriptorLength {length}, "
            f"expected {info.length}"
        )
    return Descriptor(type=kind, data=data, offset=offset)


def _components(
    reader: _Reader, revision: FormatRevision, header_size: int, file_size: int
) -> tuple[ComponentImage, ...]:
    count = reader.uint(2, "ComponentImageCount")
    return tuple(_component(reader, revision, i, header_size, file_size) for i in range(count))


def _component(
    r: _Reader, revision: FormatRevision, index: int, header_size: int, file_size: int
) -> ComponentImage:
    # DSP0267 Table 5; ComponentOpaqueDataLength and ComponentOpaqueData from 1.2 on.
    what = f"component {index}"
    start = r.pos
    classification = r.uint(2, f"ComponentClassification of {what}")
    identifier = r.uint(2, f"ComponentIdentifier of {what}")
    stamp = r.uint(4, f"ComponentComparisonStamp of {what}")
    options = ComponentOptions(r.uint(2, f"ComponentOptions of {what}"))
    activation = ActivationMethod(r.uint(2, f"RequestedComponentActivationMethod of {what}"))
    location = r.uint(4, f"ComponentLocationOffset of {what}")
    size = r.uint(4, f"ComponentSize of {what}")
    version = r.version(f"ComponentVersionString of {what}")
    opaque = None
    if revision >= FormatRevision.V1_2:
        opaque = r.raw(
            r.uint(4, f"ComponentOpaqueDataLength of {what}"), f"ComponentOpaqueData of {what}"
        )
    if location < header_size:
        raise PldmFormatError(
            f"{what} image at offset {location} starts inside the package header, "
            f"which ends at offset {header_size}"
        )
    if location + size > file_size:
        raise PldmFormatError(
            f"{what} image extends past end of file (offset {location} + size {size} > {file_size})"
        )
    return ComponentImage(
        index=index,
        offset_in_header=start,
        classification=classification,
        identifier=identifier,
        comparison_stamp=stamp,
        options=options,
        requested_activation_method=activation,
        location_offset=location,
        size=size,
        version=version,
        opaque_data=opaque,
    )


def _bits(bitmap: bytes) -> tuple[int, ...]:
    # Bit i of the little-endian bitmap (bit 0 of byte 0 first) stands for component i.
    return tuple(i for i in range(len(bitmap) * 8) if bitmap[i // 8] >> (i % 8) & 1)


def _check_bitmaps(
    bit_length: int, records: tuple[FirmwareDeviceRecord | DownstreamDeviceRecord, ...], count: int
) -> None:
    if bit_length < count:
        raise PldmFormatError(
            f"ComponentBitmapBitLength {bit_length} at offset 32 is too small for {count} components"
        )
    for record in records:
        extra = [i for i in record.applicable_components if i >= count]
        if extra:
            kind = "firmware" if isinstance(record, FirmwareDeviceRecord) else "downstream"
            raise PldmFormatError(
                f"ApplicableComponents of {kind} device record {record.index} (at offset "
                f"{record.offset}) names component {extra[0]}, but there are only {count}"
            )


def _check_overlaps(components: tuple[ComponentImage, ...]) -> None:
    placed = sorted((c for c in components if c.size), key=lambda c: c.location_offset)
    for before, after in zip(placed, placed[1:], strict=False):
        if after.location_offset < before.location_offset + before.size:
            raise PldmFormatError(
                f"component {after.index} image [{after.location_offset}, "
                f"{after.location_offset + after.size}) overlaps component {before.index} image "
                f"[{before.location_offset}, {before.location_offset + before.size})"
            )
