"""What a bundle.submitted may make the attest worker read: nothing it names is trusted."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from lockstep_attest.adapters.bundle_source import BundleRefused, BundleSource

pytestmark = pytest.mark.unit


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "bundles").mkdir()
    return tmp_path / "bundles"


def source(root: Path, max_bytes: int = 1 << 20) -> BundleSource:
    return BundleSource.of([root], max_bytes)


def test_a_directory_or_tar_below_a_root_is_read(root: Path) -> None:
    (root / "b1").mkdir()
    (root / "b1" / "manifest.json").write_text("{}")
    assert source(root).locate(str(root / "b1")) == (root / "b1").resolve()
    assert source(root).locate((root / "b1").as_uri()) == (root / "b1").resolve()


def test_a_fifo_is_refused_without_blocking(root: Path) -> None:
    # Opening a FIFO for reading blocks until a writer comes: it once hung the worker for good.
    os.mkfifo(root / "pipe")
    with pytest.raises(BundleRefused, match="not a regular file or directory"):
        source(root).locate(str(root / "pipe"))


@pytest.mark.parametrize("target", ["/etc/passwd", "/dev/zero"])
def test_anything_outside_the_roots_is_refused(root: Path, target: str) -> None:
    with pytest.raises(BundleRefused, match="outside the configured bundle roots"):
        source(root).locate(target)


def test_a_link_out_of_a_root_is_judged_by_where_it_leads(root: Path, tmp_path: Path) -> None:
    (tmp_path / "secret").mkdir()
    (root / "innocent").symlink_to(tmp_path / "secret")
    with pytest.raises(BundleRefused, match="outside"):
        source(root).locate(str(root / "innocent"))


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("relative/bundle", "must be absolute"),
        ("https://example.invalid/b.tar", "unsupported bundle URI scheme 'https'"),
        ("file://otherhost/srv/b.tar", "names another host"),
        ("/nonexistent/bundle", "cannot read"),
    ],
)
def test_malformed_or_missing_locations_are_refused(root: Path, uri: str, reason: str) -> None:
    with pytest.raises(BundleRefused, match=reason):
        source(root).locate(uri)


def test_without_roots_every_bundle_is_refused_naming_the_setting(root: Path) -> None:
    with pytest.raises(BundleRefused, match="LOCKSTEP_ATTEST_BUNDLE_ROOTS"):
        BundleSource.of([], 1 << 20).locate(str(root))


def test_a_truncated_tar_is_refused_not_a_crash(root: Path) -> None:
    whole = root / "whole.tar.gz"
    with tarfile.open(whole, "w:gz") as tar:
        info = tarfile.TarInfo("image.bin")
        info.size = 100_000
        tar.addfile(info, io.BytesIO(os.urandom(100_000)))
    cut = root / "cut.tar.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(BundleRefused, match="unreadable tar"):
        source(root).locate(str(cut))


def test_size_limits_hold_for_directories_tars_and_what_a_tar_expands_to(root: Path) -> None:
    (root / "big").mkdir()
    (root / "big" / "image.bin").write_bytes(b"x" * 2000)
    with pytest.raises(BundleRefused, match="2000 bytes exceeds the 1000-byte bundle limit"):
        source(root, 1000).locate(str(root / "big"))
    # 100 KB of zeros compresses to a few hundred bytes: the extracted size is what counts.
    bomb = root / "bomb.tar.gz"
    with tarfile.open(bomb, "w:gz") as tar:
        info = tarfile.TarInfo("image.bin")
        info.size = 100_000
        tar.addfile(info, io.BytesIO(bytes(100_000)))
    assert bomb.stat().st_size < 1000
    with pytest.raises(BundleRefused, match="100000 bytes exceeds"):
        source(root, 50_000).locate(str(bomb))
