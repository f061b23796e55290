"""DSP0267 "Package Header Information": format revisions, identifiers, release time."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import IntEnum
from types import MappingProxyType

from lockstep_common.pldm.strings import PldmString


class FormatRevision(IntEnum):
    """PackageHeaderFormatRevision: which DSP0267 header layout the package uses."""

    V1_0 = 1
    V1_1 = 2  # adds the downstream device identification area
    V1_2 = 3  # adds ComponentOpaqueData to each component image information entry
    V1_3 = 4  # adds ReferenceManifestData to ID records and the PackagePayloadChecksum

    @property
    def identifier(self) -> uuid.UUID:
        """The PackageHeaderIdentifier UUID that announces this revision."""
        return next(k for k, v in PACKAGE_HEADER_IDENTIFIERS.items() if v is self)

    @property
    def checksum_count(self) -> int:
        """CRC-32 fields closing the header: PackageHeaderChecksum, plus the payload one in 1.3."""
        return 2 if self >= FormatRevision.V1_3 else 1


# PackageHeaderIdentifier values, one per DSP0267 revision (as in libpldm and openbmc/pldm).
PACKAGE_HEADER_IDENTIFIERS: Mapping[uuid.UUID, FormatRevision] = MappingProxyType(
    {
        uuid.UUID("f018878c-cb7d-4943-9800-a02f059aca02"): FormatRevision.V1_0,
        uuid.UUID("1244d264-8d7d-4718-a030-fc8a56587d5a"): FormatRevision.V1_1,
        uuid.UUID("3119ce2f-e80a-4a99-af6d-46f8b121f6bf"): FormatRevision.V1_2,
        uuid.UUID("7b291c99-6db6-4208-801b-02026e463c78"): FormatRevision.V1_3,
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Timestamp104:
    """DSP0240 timestamp104, as used by PackageReleaseDateTime (13 bytes, little-endian)."""

    utc_offset_minutes: int
    microsecond: int
    second: int
    minute: int
    hour: int
    day: int
    month: int
    year: int
    resolution: int  # bits 7:4 UTC resolution, bits 3:0 time resolution

    @classmethod
    def from_bytes(cls, raw: bytes) -> Timestamp104:
        """Split 13 bytes into fields; no calendar validation (see to_datetime)."""
        return cls(
            utc_offset_minutes=int.from_bytes(raw[0:2], "little", signed=True),
            microsecond=int.from_bytes(raw[2:5], "little"),
            second=raw[5],
            minute=raw[6],
            hour=raw[7],
            day=raw[8],
            month=raw[9],
            year=int.from_bytes(raw[10:12], "little"),
            resolution=raw[12],
        )

    @classmethod
    def from_datetime(cls, moment: datetime) -> Timestamp104:
        """Encode a datetime; a naive one is taken as UTC."""
        offset = moment.utcoffset() or timedelta(0)
        return cls(
            utc_offset_minutes=int(offset.total_seconds()) // 60,
            microsecond=moment.microsecond,
            second=moment.second,
            minute=moment.minute,
            hour=moment.hour,
            day=moment.day,
            month=moment.month,
            year=moment.year,
            resolution=0,
        )

    def to_bytes(self) -> bytes:
        """The 13-byte wire form."""
        return (
            self.utc_offset_minutes.to_bytes(2, "little", signed=True)
            + self.microsecond.to_bytes(3, "little")
            + bytes((self.second, self.minute, self.hour, self.day, self.month))
            + self.year.to_bytes(2, "little")
            + bytes((self.resolution,))
        )

    def to_datetime(self) -> datetime | None:
        """An aware datetime, or None when the fields do not form a valid date and time."""
        try:
            zone = timezone(timedelta(minutes=self.utc_offset_minutes))
            return datetime(
                self.year,
                self.month,
                self.day,
                self.hour,
                self.minute,
                self.second,
                self.microsecond,
                tzinfo=zone,
            )
        except ValueError:
            return None


@dataclass(frozen=True, slots=True, kw_only=True)
class PackageHeader:
    """The DSP0267 "Package Header Information" fields and the checksums closing the header."""

    identifier: uuid.UUID
    format_revision: FormatRevision
    header_size: int
    release_time: Timestamp104
    component_bitmap_bit_length: int
    version: PldmString
    header_checksum: int
    payload_checksum: int | None  # PackagePayloadChecksum, format revision 1.3 only
