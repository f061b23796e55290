"""Loading migration files, their checksums, and the identifiers SQL is built from."""

from __future__ import annotations

import hashlib
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lockstep_common.db import (
    Migration,
    load_migrations,
    messaging_migrations,
    quote_ident,
    redact_dsn,
)
from lockstep_common.errors import MigrationError

pytestmark = pytest.mark.unit

MakePackage = Callable[[dict[str, str]], str]


@pytest.fixture
def make_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MakePackage]:
    """Write files into a fresh importable package and return the package's name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []

    def make(files: dict[str, str]) -> str:
        name = f"lockstep_unittest_migrations_{uuid.uuid4().hex}"
        folder = tmp_path / name
        folder.mkdir()
        (folder / "__init__.py").write_text("")
        for file_name, text in files.items():
            (folder / file_name).write_text(text, encoding="utf-8")
        made.append(name)
        return name

    yield make
    for name in made:
        sys.modules.pop(name, None)


def test_shipped_messaging_migrations_load_in_order() -> None:
    migrations = load_migrations("common", "lockstep_common.migrations")

    assert migrations
    assert [m.version for m in migrations] == sorted({m.version for m in migrations})
    assert migrations[0].version == 1
    assert migrations[0].name == "messaging"
    assert all(m.component == "common" for m in migrations)
    assert "CREATE TABLE outbox" in migrations[0].sql


def test_shipped_migration_checksums_are_the_sha256_of_the_file_and_stable() -> None:
    first = load_migrations("common", "lockstep_common.migrations")
    second = messaging_migrations()

    assert [m.checksum for m in first] == [m.checksum for m in second]
    for m in first:
        assert m.checksum == hashlib.sha256(m.sql.encode()).hexdigest()
        assert len(m.checksum) == 64


def test_checksum_changes_when_the_sql_changes() -> None:
    before = Migration("common", 1, "messaging", "CREATE TABLE t (a int);")
    after = Migration("common", 1, "messaging", "CREATE TABLE t (a bigint);")

    assert before.checksum != after.checksum
    assert before.checksum == Migration("other", 9, "x", "CREATE TABLE t (a int);").checksum


def test_migrations_sort_by_number_and_non_sql_files_are_ignored(make_package: MakePackage) -> None:
    package = make_package(
        {
            "0010_later.sql": "SELECT 10;",
            "0002_second.sql": "SELECT 2;",
            "0001_first.sql": "SELECT 1;",
            "README.md": "not a migration",
        }
    )

    migrations = load_migrations("svc", package)

    assert [(m.version, m.name, m.sql) for m in migrations] == [
        (1, "first", "SELECT 1;"),
        (2, "second", "SELECT 2;"),
        (10, "later", "SELECT 10;"),
    ]


def test_duplicate_migration_versions_are_refused(make_package: MakePackage) -> None:
    package = make_package({"0001_a.sql": "SELECT 1;", "0001_b.sql": "SELECT 2;"})

    with pytest.raises(MigrationError, match=f"duplicate migration versions in {package}"):
        load_migrations("svc", package)


@pytest.mark.parametrize("name", ["inventory", "lockstep_inventory", "_private", "a" * 63, "s2"])
def test_quote_ident_quotes_plain_lower_case_names(name: str) -> None:
    assert quote_ident(name) == f'"{name}"'


@pytest.mark.parametrize(
    "name",
    [
        "x; DROP",
        'x"; DROP SCHEMA public CASCADE; --',
        "Inventory",
        "INVENTORY",
        "1st",
        "",
        "a-b",
        "a b",
        "a.b",
        "a" * 64,
        "inventory\n",
    ],
)
def test_quote_ident_refuses_anything_but_a_plain_lower_case_name(name: str) -> None:
    with pytest.raises(ValueError, match="is not a valid schema name"):
        quote_ident(name)


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://lockstep:s3cret@db:5432/fleet", "postgresql://lockstep:***@db:5432/fleet"),
        (
            "postgresql://postgres@127.0.0.1:5432/lockstep",
            "postgresql://postgres@127.0.0.1:5432/lockstep",
        ),
    ],
)
def test_redacted_dsn_hides_the_password_only(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown


def test_a_misnamed_sql_file_is_refused_rather_than_silently_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "misnamed_migrations_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "0001_ok.sql").write_text("SELECT 1;")
    (package / "0002_Add-Index.sql").write_text("SELECT 2;")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MigrationError, match=r"0002_Add-Index\.sql is not named NNNN_lower_snake"):
        load_migrations("svc", "misnamed_migrations_pkg")
