"""Secrets of the embedded stack: random, generated once, kept in files only their owner reads.

Layout: ``<data_dir>/secrets/<identity>/<name>``, directories 0700 and files 0600, so a secret is
never on a command line, in the environment of a process listing or in a log: processes are
given the file's path (``LOCKSTEP_NATS_PASSWORD_FILE``) and read it when they connect.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def path_of(data_dir: Path, identity: str, name: str) -> Path:
    """Where ``identity``'s secret ``name`` lives (whether or not it exists yet)."""
    return data_dir / "secrets" / identity / name


def secret_file(data_dir: Path, identity: str, name: str) -> Path:
    """The file holding ``identity``'s secret ``name``, created with a random value if missing."""
    directory = path_of(data_dir, identity, name).parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    for d in (data_dir / "secrets", directory):
        d.chmod(0o700)
    path = directory / name
    if not path.exists():
        # O_EXCL: two starts racing never overwrite each other's secret.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return path
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
    path.chmod(0o600)
    return path


def read(path: Path) -> str:
    """The secret held in ``path``."""
    return path.read_text(encoding="utf-8").strip()
