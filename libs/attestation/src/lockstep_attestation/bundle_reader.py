"""Reads a bundle (directory or tar) once, into the facts the checks need.

Every image is read exactly once, in large chunks, hashed on the way (SHA-384 always, SHA-512
only for images whose S.A.F.E. report carries no usable SHA-384), by a small thread pool:
hashlib releases the GIL on large buffers, so images hash in parallel on several cores.
PLDM packages are then parsed from a memory map of the same, now cached, pages.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from lockstep_attestation.evidence import ImageFacts, LoadedBundle
from lockstep_common.bundle import MANIFEST_FILE, SIGNATURE_FILE, ImageFormat, Manifest
from lockstep_common.pldm import PldmFormatError, parse_package_file

CHUNK = 8 << 20
MAX_DOCUMENT = 16 << 20  # manifest, RIMs, reports and SBOM are small; refuse to buffer more
DOCUMENT_DIRS = ("rim", "safe")

Sha512Needs = Callable[[Manifest, dict[str, bytes]], set[str]]


class BundleReadError(ValueError):
    """The bundle cannot be read at all (not a directory or tar, unsafe tar member...)."""


@contextmanager
def opened(path: Path) -> Iterator[Path]:
    """A directory holding the bundle: ``path`` itself, or a tar extracted safely."""
    if path.is_dir():
        yield path
        return
    if not tarfile.is_tarfile(path):
        raise BundleReadError(f"{path} is neither a directory nor a tar archive")
    with tempfile.TemporaryDirectory(prefix="lockstep-bundle-") as tmp, tarfile.open(path) as tar:
        try:
            # The "data" filter refuses absolute paths, '..', links out of the tree and devices.
            tar.extractall(tmp, filter="data")
        except tarfile.FilterError as exc:
            raise BundleReadError(f"{path}: unsafe tar member: {exc}") from None
        except (tarfile.TarError, EOFError, zlib.error) as exc:  # truncated or corrupt
            raise BundleReadError(f"{path}: unreadable tar: {exc}") from None
        yield Path(tmp)


def load_bundle(
    path: Path, *, sha512_needed: Sha512Needs | None = None, workers: int = 0
) -> LoadedBundle:
    """Read ``path`` (directory or tar) into a LoadedBundle."""
    with opened(path) as root:
        return _load(root, str(path), sha512_needed, workers or min(4, os.cpu_count() or 1))


def _load(root: Path, source: str, sha512_needed: Sha512Needs | None, workers: int) -> LoadedBundle:
    files, errors = _walk(root)
    raw = (
        _read_small(root / MANIFEST_FILE, errors, MANIFEST_FILE) if MANIFEST_FILE in files else None
    )
    manifest_json, manifest, manifest_error = _parse_manifest(raw)
    sig_raw = (
        _read_small(root / SIGNATURE_FILE, errors, SIGNATURE_FILE)
        if SIGNATURE_FILE in files
        else None
    )
    documents = {
        f: data
        for f in files
        if f.split("/", 1)[0] in DOCUMENT_DIRS or f == "sbom.cdx.json"
        if (data := _read_small(root / f, errors, f)) is not None
    }
    image_paths = sorted(f for f in files if f.startswith("images/"))
    needs512 = sha512_needed(manifest, documents) if manifest and sha512_needed else set()
    pldm = {
        e.image
        for c in (manifest.profiles.values() if manifest else ())
        for e in c.values()
        if e.format is ImageFormat.PLDM
    }
    with ThreadPoolExecutor(max_workers=workers) as pool:
        facts = list(pool.map(lambda p: _image(root, p, p in needs512, p in pldm), image_paths))
    images = {f.path: f for f in facts}
    named = _named(manifest)
    known = {MANIFEST_FILE, SIGNATURE_FILE, "sbom.cdx.json"}
    unlisted = (
        tuple(sorted(f for f in files if f not in named and f not in known)) if manifest else ()
    )
    missing = tuple(sorted(n for n in named if n not in files))
    return LoadedBundle(
        source=source,
        manifest_json=manifest_json,
        manifest=manifest,
        manifest_error=manifest_error,
        signature=sig_raw.decode("ascii", "replace") if sig_raw is not None else None,
        images=images,
        documents=documents,
        unlisted=unlisted,
        missing=missing,
        digest=_digest(root, files, images, documents, raw, sig_raw),
        read_errors=errors,
    )


def _walk(root: Path) -> tuple[list[str], dict[str, str]]:
    files, errors = [], {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                errors[rel] = "symbolic links are not allowed in a bundle"
            elif full.is_file():
                files.append(rel)
    return sorted(files), errors


def _read_small(path: Path, errors: dict[str, str], rel: str) -> bytes | None:
    size = path.stat().st_size
    if size > MAX_DOCUMENT:
        errors[rel] = f"{size} bytes exceeds the {MAX_DOCUMENT}-byte limit for documents"
        return None
    return path.read_bytes()


def _parse_manifest(raw: bytes | None) -> tuple[object, Manifest | None, str | None]:
    if raw is None:
        return None, None, "manifest.json is missing"
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        return None, None, f"not JSON: {exc}"
    try:
        return parsed, Manifest.model_validate_json(raw), None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
            for e in exc.errors()[:5]
        )
        return parsed, None, problems


def _image(root: Path, rel: str, want512: bool, is_pldm: bool) -> ImageFacts:
    h384 = hashlib.sha384()
    h512 = hashlib.sha512() if want512 else None
    size = 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with (root / rel).open("rb", buffering=0) as f:
        while n := f.readinto(buf):
            chunk = view[:n]
            h384.update(chunk)
            if h512 is not None:
                h512.update(chunk)
            size += n
    facts = ImageFacts(rel, size, h384.hexdigest(), h512.hexdigest() if h512 else None)
    if not is_pldm:
        return facts
    try:
        pkg = parse_package_file(root / rel)
    except (PldmFormatError, OSError) as exc:
        return dataclasses.replace(facts, pldm_error=str(exc))
    # Keep the parsed structure, not the mapping of the file.
    return dataclasses.replace(facts, pldm=dataclasses.replace(pkg, data=memoryview(b"")))


def _named(manifest: Manifest | None) -> set[str]:
    if manifest is None:
        return set()
    names = set(manifest.images())
    for comps in manifest.profiles.values():
        for e in comps.values():
            names.update(e.safe)
            if e.rim:
                names.add(e.rim)
    return names


def _digest(
    root: Path,
    files: list[str],
    images: dict[str, ImageFacts],
    documents: dict[str, bytes],
    manifest: bytes | None,
    signature: bytes | None,
) -> str:
    """SHA-256 over every file's path and SHA-384: equal only for byte-identical bundles."""
    h = hashlib.sha256()
    for rel in files:
        if rel in images:
            digest = images[rel].sha384
        elif rel in documents:
            digest = hashlib.sha384(documents[rel]).hexdigest()
        elif rel == MANIFEST_FILE and manifest is not None:
            digest = hashlib.sha384(manifest).hexdigest()
        elif rel == SIGNATURE_FILE and signature is not None:
            digest = hashlib.sha384(signature).hexdigest()
        else:
            digest = hashlib.sha384((root / rel).read_bytes()).hexdigest()
        h.update(f"{rel}\0{digest}\n".encode())
    return h.hexdigest()
