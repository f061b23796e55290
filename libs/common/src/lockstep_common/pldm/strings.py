"""DSP0267 typed strings: a one-byte type code, a one-byte length and the encoded bytes.

Every version string in a package (PackageVersionString, ComponentImageSetVersionString,
ComponentVersionString, ...) and the title of a vendor-defined descriptor use this shape
(DSP0267 "Package Header Information", PackageVersionStringType).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from enum import IntEnum

from lockstep_common.pldm.errors import PldmFormatError


class StringType(IntEnum):
    """String type codes (DSP0267 PackageVersionStringType)."""

    UNKNOWN = 0
    ASCII = 1
    UTF8 = 2
    UTF16 = 3
    UTF16LE = 4
    UTF16BE = 5


_CODECS = {
    StringType.ASCII: "ascii",
    StringType.UTF8: "utf-8",
    StringType.UTF16LE: "utf-16-le",
    StringType.UTF16BE: "utf-16-be",
}
_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


@dataclass(frozen=True, slots=True)
class PldmString:
    """A decoded DSP0267 string; ``raw`` keeps the exact bytes from the package."""

    string_type: StringType
    raw: bytes
    text: str

    def __str__(self) -> str:
        return self.text


def _decode_text(string_type: StringType, raw: bytes) -> str:
    if string_type is not StringType.UTF16:
        return raw.decode(_CODECS[string_type])
    # "UTF-16" without an explicit order: honour a BOM, otherwise big-endian as the Unicode
    # standard prescribes for unmarked UTF-16 (Python's "utf-16" codec would pick native order).
    if raw[:2] in _BOMS:
        return raw.decode("utf-16")
    return raw.decode("utf-16-be")


def decode_string(type_code: int, raw: bytes, field: str, offset: int) -> PldmString:
    """Decode one typed string.

    Args:
        type_code: The string type byte as stored.
        raw: The string bytes.
        field: The field name, for error messages.
        offset: Byte offset of the string bytes in the package, for error messages.

    Returns:
        The decoded string.

    Raises:
        PldmFormatError: The type is 0 (Unknown) or not a DSP0267 type, or the bytes are not
            valid in that encoding.
    """
    try:
        string_type = StringType(type_code)
    except ValueError:
        raise PldmFormatError(
            f"{field}: unknown string type {type_code} (DSP0267 defines 1-5) "
            f"for the string at offset {offset}"
        ) from None
    if string_type is StringType.UNKNOWN:
        raise PldmFormatError(
            f"{field}: string type 0 (Unknown) cannot be decoded, string at offset {offset}"
        )
    try:
        text = _decode_text(string_type, raw)
    except UnicodeDecodeError as exc:
        raise PldmFormatError(
            f"{field}: invalid {string_type.name} at offset {offset + exc.start}: {exc.reason}"
        ) from None
    return PldmString(string_type, raw, text)


def encode_string(text: str, string_type: StringType = StringType.ASCII) -> bytes:
    """Encode ``text`` as ``string_type``; UTF16 is written big-endian with a BOM.

    Raises:
        ValueError: The type is UNKNOWN, the text does not fit the encoding, or the result is
            longer than the 255 bytes a one-byte length can describe.
    """
    if string_type is StringType.UNKNOWN:
        raise ValueError("cannot encode a string of type UNKNOWN")
    if string_type is StringType.UTF16:
        raw = codecs.BOM_UTF16_BE + text.encode("utf-16-be")
    else:
        raw = text.encode(_CODECS[string_type])
    if len(raw) > 255:
        raise ValueError(f"string {text!r} encodes to {len(raw)} bytes; the limit is 255")
    return raw
