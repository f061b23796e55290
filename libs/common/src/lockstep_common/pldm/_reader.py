"""Bounds-checked reads over a package buffer, shared by the parser modules."""

from __future__ import annotations

from dataclasses import dataclass

from lockstep_common.pldm.errors import PldmFormatError
from lockstep_common.pldm.header import FormatRevision
from lockstep_common.pldm.strings import PldmString, decode_string


class Reader:
    """Little-endian reads from ``[pos, end)`` of ``buf``; ``area`` names that range.

    A read that would cross ``end`` raises PldmFormatError naming the field, its offset and
    where the area ends, and checks the size before slicing, so no length field can make it
    allocate more than the area holds.
    """

    __slots__ = ("area", "buf", "end", "pos")

    def __init__(self, buf: memoryview, pos: int, end: int, area: str) -> None:
        self.buf, self.pos, self.end, self.area = buf, pos, end, area

    def take(self, size: int, what: str) -> memoryview:
        """The next ``size`` bytes as a view."""
        if size > self.end - self.pos:
            raise PldmFormatError(
                f"truncated {what}: needs {size} bytes at offset {self.pos}, "
                f"but {self.area} ends at offset {self.end}"
            )
        self.pos += size
        return self.buf[self.pos - size : self.pos]

    def uint(self, size: int, what: str) -> int:
        """The next ``size`` bytes as an unsigned little-endian integer."""
        return int.from_bytes(self.take(size, what), "little")

    def raw(self, size: int, what: str) -> bytes:
        """The next ``size`` bytes, copied."""
        return bytes(self.take(size, what))

    def string(self, type_code: int, length: int, what: str) -> PldmString:
        """The next ``length`` bytes decoded as a string of type ``type_code``."""
        offset = self.pos
        return decode_string(type_code, self.raw(length, what), what, offset)

    def version(self, what: str) -> PldmString:
        """A type byte, a length byte and a non-empty string, back to back."""
        type_code = self.uint(1, f"{what} type")
        length = self.uint(1, f"{what} length")
        if length == 0:
            # libpldm rejects empty version strings as well: a UA could not report them.
            raise PldmFormatError(f"{what} length at offset {self.pos - 1} is 0")
        return self.string(type_code, length, what)


@dataclass(frozen=True, slots=True)
class Layout:
    """What the header fixes for the areas that follow it."""

    revision: FormatRevision
    bitmap_bytes: int  # ComponentBitmapBitLength / 8
