"""Every place that orders versions orders them the same, on every version string the reference
captures hold (NVIDIA Redfish mockups, PLDM package metadata, S.A.F.E. reports).

Four orderings used to disagree here: the updater's in-band fallback read ``6C`` as -1 and
``35_2014_4652`` as one non-numeric field, attest and the rules read ``01.01.03`` above
``1.0.7``, and Redfish called the two equal (it stopped at the first field that differed as
text, ``01`` against ``1``). Now each call site asks ``lockstep_common.versions``; this test
holds them to it through their own public behaviour, so a call site that grows its own
ordering again fails here.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from functools import cache
from types import SimpleNamespace
from typing import Any, cast

import pytest

from lockstep_attestation.checks import anti_rollback
from lockstep_common.compatibility.rules import driver_below
from lockstep_common.versions import DOT_INTEGER, compare_versions, is_dot_integer, newest
from lockstep_redfish.readback import Readback, judge
from lockstep_updater.domain.inband import fallback_for
from tests.reference import REFERENCE
from tests.unit.updater.test_inband import MISMATCH

pytestmark = pytest.mark.unit

# Protocol revisions, not firmware or software versions.
NOT_FIRMWARE = {"RedfishVersion", "RtpVersion", "PackageHeaderFormatVersion"}


def _collect(doc: Any, key: str | None, out: set[str]) -> None:
    if isinstance(doc, dict):
        for k, v in doc.items():
            _collect(v, k, out)
    elif isinstance(doc, list):
        for v in doc:
            _collect(v, key, out)
    elif (
        isinstance(doc, str)
        and key is not None
        and key.endswith(("Version", "VersionString"))
        and key not in NOT_FIRMWARE
    ):
        out.add(doc)


@cache
def reference_versions() -> tuple[str, ...]:
    found: set[str] = set()
    for path in sorted(REFERENCE.rglob("*.json")):
        _collect(json.loads(path.read_text(encoding="utf-8")), None, found)
    return tuple(sorted(found))


def pairs() -> list[tuple[str, str]]:
    return list(itertools.permutations(reference_versions(), 2))


def redfish_readback(a: str, b: str) -> int | None:
    """The read-back calls ``a`` a silent downgrade from ``b`` exactly when ``a`` is below."""
    downgraded = judge(before=b, after=a, expected="(pushed)", scheme=None)
    return -1 if downgraded is Readback.DOWNGRADED else None


def attest_rollback(a: str, b: str) -> int | None:
    """Attest's anti-rollback check on a component at ``a`` whose floor is ``b``."""
    entry = SimpleNamespace(version=a, lowest_supported_version=b)
    bundle = SimpleNamespace(manifest=SimpleNamespace(profiles={"p": {_Comp(): entry}}))
    (finding,) = anti_rollback(cast(Any, bundle), None, approved=False)
    if finding.passed:
        return None  # at or above the floor: 0 or 1
    return -1 if "is below" in finding.reason else None


class _Comp:
    value = "component"


def rules_driver(a: str, b: str) -> int | None:
    """The compatibility rules ask only whether a numeric driver is below a numeric floor."""
    if not (is_dot_integer(a) and is_dot_integer(b)):
        return None  # refused as "not numeric" before any ordering
    return -1 if driver_below(a, b) else None


STATE = MISMATCH  # a node agent's state; only its firmware directories matter here


def inband_fallback(a: str, b: str) -> int | None:
    """The in-band fallback branch is the newer of the directories left on the node."""
    chosen = fallback_for(replace(STATE, firmware_dirs=(a, b)), target="(target)")
    swapped = fallback_for(replace(STATE, firmware_dirs=(b, a)), target="(target)")
    if chosen is None:
        return None
    if chosen != swapped:
        return 0  # it keeps whichever came first of two it holds equal ("01" and "1.0")
    return 1 if chosen == a else -1


CALL_SITES = {
    "redfish read-back": (redfish_readback, None),
    "attest anti-rollback": (attest_rollback, None),
    "compatibility rules": (rules_driver, DOT_INTEGER),
    "updater in-band fallback": (inband_fallback, DOT_INTEGER),
}


def test_the_reference_captures_hold_the_vendor_version_shapes() -> None:
    versions = reference_versions()
    assert len(versions) >= 40
    for shape in ("97.00.6C.00.03", "0x00 0x0b 0x03 0x04", "01.03.0262.0000_n04", "535.154.05"):
        assert shape in versions


@pytest.mark.parametrize("site", sorted(CALL_SITES))
def test_each_call_site_orders_every_reference_pair_as_the_one_ordering(site: str) -> None:
    decide, scheme = CALL_SITES[site]
    wrong: list[tuple[str, str, int | None, int | None]] = []
    for a, b in pairs():
        said, order = decide(a, b), compare_versions(a, b, scheme)
        # A call site may say less than the ordering (a check only asks "below?"), never else.
        if said is not None and said != order:
            wrong.append((a, b, said, order))
        if said is None and order == -1 and site != "compatibility rules":
            wrong.append((a, b, said, order))
    assert not wrong, f"{site} disagrees on {len(wrong)} pair(s), e.g. {wrong[:3]}"


def test_the_call_sites_never_contradict_each_other() -> None:
    for a, b in pairs():
        answers = {
            site: said
            for site, (decide, _) in CALL_SITES.items()
            if (said := decide(a, b)) is not None
        }
        assert len(set(answers.values())) <= 1, (a, b, answers)


def test_the_ordering_is_antisymmetric_and_consistent_on_the_reference() -> None:
    versions = reference_versions()
    for a, b in itertools.permutations(versions, 2):
        ab, ba = compare_versions(a, b), compare_versions(b, a)
        assert (ab is None and ba is None) or (ab is not None and ba == -ab), (a, b)
    for a, b, c in itertools.permutations(versions[:25], 3):
        if compare_versions(a, b) == -1 and compare_versions(b, c) == -1:
            assert compare_versions(a, c) in (-1, None), (a, b, c)


def test_numerically_equal_fields_do_not_end_the_comparison() -> None:
    assert compare_versions("01.01.03", "1.0.7") == 1
    assert compare_versions("1.0.7", "01.01.03") == -1


def test_newest_refuses_to_guess_between_versions_it_cannot_order() -> None:
    assert newest(["580.65.06", "535.261.03", "580.95.05"], DOT_INTEGER) == "580.95.05"
    assert newest(["GB200Nvl-24.12-8", "GB300Nvl-24.12-8"]) is None
    assert newest([]) is None
