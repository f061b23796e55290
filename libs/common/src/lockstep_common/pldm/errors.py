"""The one exception the PLDM package parser raises for malformed input."""

from __future__ import annotations


class PldmFormatError(ValueError):
    """A PLDM firmware update package (DSP0267) is malformed.

    The message names the field that is wrong and its byte offset from the start of the
    package, so an operator can find the fault with a hex dump. Every defect in the input
    (truncation, bad lengths, checksum mismatches, unknown codes) raises this class and
    nothing else.
    """
