"""Where the real third-party artifacts live (NVIDIA Redfish captures, DMTF CSDL, S.A.F.E.
reports, PLDM packages, CoRIM): ``tests/data/reference`` inside the repository.

They are vendored, not looked up on the machine, so a clone made anywhere runs every test of
them; ``tests/data/reference/README.md`` names each one's upstream source and licence, and
``tests/unit/test_reference_data.py`` checks the copy is complete.
"""

from __future__ import annotations

from pathlib import Path

REFERENCE = Path(__file__).resolve().parent / "data" / "reference"
