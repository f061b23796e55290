"""Parse PLDM firmware update packages, DSP0267 header format revisions 1.0 to 1.3.

Layout (all integers little-endian): package header information, firmware device
identification area, downstream device identification area (1.1+), component image
information area, PackageHeaderChecksum, PackagePayloadChecksum (1.3 only), then the
component images at the offsets the header gives.

Every read is bounds-checked against the area it belongs to, so malformed input raises
PldmFormatError naming the field and its byte offset. Loops run over one- or two-byte counts
and bytes are copied only from inside the header (at most 64 KiB): no length field can cause
a large allocation. Component images are never copied.
"""

from __future__ import annotations

import itertools
import mmap
import os
import uuid
import zlib

from lockstep_common.pldm._reader import Layout, Reader
from lockstep_common.pldm._records import downstream_record, firmware_record
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
    DownstreamDeviceRecord,
    FirmwareDeviceRecord,
    PldmPackage,
)

_FIXED_HEADER = 36  # PackageHeaderIdentifier .. PackageVersionStringLength
_BITMAP_LENGTH_AT = 32  # offset of ComponentBitmapBitLength


def parse_package(
    data: bytes | bytearray | memoryview, *, verify_checksums: bool = True
) -> PldmPackage:
    """Parse a PLDM firmware update package held in memory.

    Args:
        data: The whole package file. The result keeps a view of it: do not modify it.
        verify_checksums: Check PackageHeaderChecksum and, for 1.3, PackagePayloadChecksum
            (CRC-32, IEEE 802.3). Turn off only to inspect a damaged package.

    Returns:
        The parsed package.

    Raises:
        PldmFormatError: The package is malformed; the message names the field and offset.
    """
    view = memoryview(data).cast("B")
    reader = Reader(view, 0, len(view), "the file")
    revision = _identification(reader)
    header_size = reader.uint(2, "PackageHeaderSize")
    checksums_at = _checksums_offset(header_size, revision, len(view))
    if verify_checksums:
        _verify_checksums(view, revision, header_size, checksums_at)
    # From here on every field must lie inside the header that PackageHeaderSize declares.
    reader.end, reader.area = checksums_at, "the package header (per PackageHeaderSize)"
    release = Timestamp104.from_bytes(reader.raw(13, "PackageReleaseDateTime"))
    bit_length = reader.uint(2, "ComponentBitmapBitLength")
    if bit_length % 8:
        raise PldmFormatError(
            f"ComponentBitmapBitLength {bit_length} at offset {_BITMAP_LENGTH_AT} "
            "is not a multiple of 8"
        )
    version = reader.version("PackageVersionString")
    devices, downstream = _identification_areas(reader, Layout(revision, bit_length // 8))
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
        header_checksum=_u32(view, checksums_at),
        payload_checksum=_u32(view, checksums_at + 4) if revision.checksum_count == 2 else None,
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
    with open(path, "rb") as file:  # noqa: PTH123 - the descriptor is needed for mmap
        if os.fstat(file.fileno()).st_size == 0:  # mmap cannot map an empty file
            return parse_package(b"", verify_checksums=verify_checksums)
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    return parse_package(memoryview(mapped), verify_checksums=verify_checksums)


def _u32(view: memoryview, offset: int) -> int:
    return int.from_bytes(view[offset : offset + 4], "little")


def _identification(reader: Reader) -> FormatRevision:
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


def _checksums_offset(header_size: int, revision: FormatRevision, file_size: int) -> int:
    # Fixed fields, the area counts (no downstream count in 1.0) and the checksum fields.
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
    stored, computed = _u32(view, checksums_at), zlib.crc32(view[:checksums_at])
    if stored != computed:
        raise PldmFormatError(
            f"header checksum mismatch: PackageHeaderChecksum at offset {checksums_at} stores "
            f"0x{stored:08x}, computed 0x{computed:08x} over offsets 0-{checksums_at - 1}"
        )
    if revision.checksum_count < 2:
        return
    # DSP0267 1.3: the payload CRC starts right after its own field (at PackageHeaderSize)
    # and runs to the end of the file: every image and any padding between them.
    stored, computed = _u32(view, checksums_at + 4), zlib.crc32(view[header_size:])
    if stored != computed:
        raise PldmFormatError(
            f"payload checksum mismatch: PackagePayloadChecksum at offset {checksums_at + 4} "
            f"stores 0x{stored:08x}, computed 0x{computed:08x} over offsets "
            f"{header_size}-{len(view) - 1}"
        )


def _identification_areas(
    reader: Reader, layout: Layout
) -> tuple[tuple[FirmwareDeviceRecord, ...], tuple[DownstreamDeviceRecord, ...]]:
    count = reader.uint(1, "DeviceIDRecordCount")
    devices = tuple(firmware_record(reader, layout, i) for i in range(count))
    if layout.revision < FormatRevision.V1_1:
        return devices, ()
    count = reader.uint(1, "DownstreamDeviceIDRecordCount")
    return devices, tuple(downstream_record(reader, layout, i) for i in range(count))


def _components(
    reader: Reader, revision: FormatRevision, header_size: int, file_size: int
) -> tuple[ComponentImage, ...]:
    count = reader.uint(2, "ComponentImageCount")
    return tuple(_component(reader, revision, i, (header_size, file_size)) for i in range(count))


def _component(
    r: Reader, revision: FormatRevision, index: int, bounds: tuple[int, int]
) -> ComponentImage:
    # "Component Image Information": ComponentOpaqueDataLength and ...Data from 1.2 on.
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
        opaque_length = r.uint(4, f"ComponentOpaqueDataLength of {what}")
        opaque = r.raw(opaque_length, f"ComponentOpaqueData of {what}")
    _check_location(what, location, size, bounds)
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


def _check_location(what: str, location: int, size: int, bounds: tuple[int, int]) -> None:
    header_size, file_size = bounds
    if location < header_size:
        raise PldmFormatError(
            f"{what} image at offset {location} starts inside the package header, "
            f"which ends at offset {header_size}"
        )
    if location + size > file_size:
        raise PldmFormatError(
            f"{what} image extends past end of file (offset {location} + size {size} > {file_size})"
        )


def _check_bitmaps(
    bit_length: int, records: tuple[FirmwareDeviceRecord | DownstreamDeviceRecord, ...], count: int
) -> None:
    if bit_length < count:
        raise PldmFormatError(
            f"ComponentBitmapBitLength {bit_length} at offset {_BITMAP_LENGTH_AT} "
            f"is too small for {count} components"
        )
    for record in records:
        beyond = [i for i in record.applicable_components if i >= count]
        if beyond:
            kind = "firmware" if isinstance(record, FirmwareDeviceRecord) else "downstream"
            raise PldmFormatError(
                f"ApplicableComponents of {kind} device record {record.index} (record at offset "
                f"{record.offset}) names component {beyond[0]}, but there are only {count}"
            )


def _check_overlaps(components: tuple[ComponentImage, ...]) -> None:
    # Sorted by offset, any overlap shows up between neighbours.
    placed = sorted((c for c in components if c.size), key=lambda c: c.location_offset)
    for before, after in itertools.pairwise(placed):
        before_end = before.location_offset + before.size
        if after.location_offset < before_end:
            raise PldmFormatError(
                f"component {after.index} image [{after.location_offset}, "
                f"{after.location_offset + after.size}) overlaps component {before.index} "
                f"image [{before.location_offset}, {before_end})"
            )
