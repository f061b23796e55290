"""The real third-party artifacts the suite tests against are present.

Tests that read them skip one by one when a folder is missing, so that the rest still runs and
says something; this test turns such a checkout red, naming what is missing, so a run without
the artifacts is never passed off as covering them.
"""

from __future__ import annotations

import pytest

from tests.reference import REFERENCE

pytestmark = pytest.mark.unit
NEEDED = ("redfish-mockups", "redfish-csdl", "ocp-safe", "corim", "pldm")


def test_every_reference_folder_the_suite_reads_is_present() -> None:
    missing = [name for name in NEEDED if not (REFERENCE / name).is_dir()]
    assert not missing, (
        f"missing under {REFERENCE}: {', '.join(missing)} (set LOCKSTEP_SHARED_DIR to the "
        "workspace's shared/ folder)"
    )
