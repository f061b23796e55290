"""The vendored third-party artifacts (tests/data/reference) are complete and unchanged.

The tests that read them assume they are there; this test says what is wrong when a checkout
lost one (a sparse or partial clone, a git filter, a line-ending conversion) or when someone
changed one, added one without recording it, or let the README's table drift from the files.
"""

from __future__ import annotations

import hashlib
import re

import pytest

from tests.reference import REFERENCE

pytestmark = pytest.mark.unit
MANIFEST = REFERENCE / "MANIFEST.sha256"
README = REFERENCE / "README.md"
OWN_FILES = {"README.md", "MANIFEST.sha256", ".gitattributes"}  # describe the data, not part of it
# A table row of the README: "| `folder/` | file count | ..."
ROW = re.compile(r"^\| `(?P<folder>[^`]+)/` \| (?P<count>\d+) \|", re.MULTILINE)


def _manifest() -> dict[str, str]:
    """``sha256sum`` output: ``<hex>  <path>`` per line; paths may contain spaces."""
    entries = {}
    for line in MANIFEST.read_text(encoding="utf-8").splitlines():
        digest, path = line.split("  ", 1)
        entries[path] = digest
    return entries


def _present() -> set[str]:
    return {
        p.relative_to(REFERENCE).as_posix()
        for p in REFERENCE.rglob("*")
        if p.is_file() and p.relative_to(REFERENCE).as_posix() not in OWN_FILES
    }


def _rows() -> dict[str, int]:
    return {m["folder"]: int(m["count"]) for m in ROW.finditer(README.read_text(encoding="utf-8"))}


def test_every_listed_file_is_present_unchanged_and_nothing_is_unlisted() -> None:
    listed, present = _manifest(), _present()
    assert sorted(listed.keys() - present) == [], "listed in MANIFEST.sha256 but missing"
    assert sorted(present - listed.keys()) == [], "present but not in MANIFEST.sha256"
    changed = [
        path
        for path, digest in listed.items()
        if hashlib.sha256((REFERENCE / path).read_bytes()).hexdigest() != digest
    ]
    assert changed == [], "content differs from MANIFEST.sha256"


def test_readme_rows_cover_every_file_once_with_true_counts() -> None:
    rows, listed = _rows(), _manifest()
    counts = {folder: sum(p.startswith(folder + "/") for p in listed) for folder in rows}
    assert counts == rows, "README.md file counts differ from MANIFEST.sha256"
    uncovered = [p for p in listed if sum(p.startswith(f + "/") for f in rows) != 1]
    assert uncovered == [], "files under no README.md row, or under two"
