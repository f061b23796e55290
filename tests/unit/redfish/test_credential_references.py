"""A ``file:`` credential reference is usable only as a regular file its owner alone may read
(issue 31: a missing file, a directory and a 0644 file were accepted at import)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep_redfish.credentials import reference_problem

pytestmark = pytest.mark.unit
GOOD = '{"default": {"username": "operator", "password": "s3cret-value"}}'


def written(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_an_owner_only_file_of_credentials_is_usable(tmp_path: Path) -> None:
    assert reference_problem(f"file:{written(tmp_path / 'b.json', GOOD, 0o600)}") is None
    assert reference_problem(f"file:{written(tmp_path / 'r.json', GOOD, 0o400)}") is None
    assert reference_problem("env:LOCKSTEP_BMC") is None  # the sweeping process's variables


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d: d / "missing.json", "no such file"),
        (lambda d: d, "is a directory"),
        (lambda d: written(d / "b.json", GOOD, 0o644), "group or others may read it (mode 0644)"),
        (lambda d: written(d / "b.json", GOOD, 0o640), "(mode 0640)"),
        (lambda d: written(d / "b.json", GOOD, 0o602), "(mode 0602)"),
        (lambda d: written(d / "b.json", "{nope", 0o600), "not valid JSON"),
        (lambda d: written(d / "b.json", '{"default": {"username": "u"}}', 0o600), "password"),
    ],
)
def test_an_unusable_file_is_named_in_one_line_without_its_secret(
    tmp_path: Path, make: object, says: str
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    problem = reference_problem(f"file:{path}")
    assert problem is not None and problem.startswith(f"file:{path}: ")
    assert says in problem and "\n" not in problem and "s3cret" not in problem
