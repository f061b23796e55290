"""Where BMC credentials come from (design.md non-negotiable 8).

A :class:`CredentialSource` answers ``get(node_id) -> (username, password)`` just in time, per
BMC. Secrets are never logged and never put into results or exceptions: a
:class:`CredentialError` names the node and the source, never a value.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from lockstep_redfish.errors import CredentialError


class CredentialSource(Protocol):
    def get(self, node_id: str) -> tuple[str, str]:
        """(username, password) for the BMC of ``node_id``; raises :class:`CredentialError`."""
        ...


def _env_key(node_id: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", node_id.upper())


class EnvCredentials:
    """Credentials from environment variables: ``{prefix}_{NODE}_USERNAME`` and
    ``{prefix}_{NODE}_PASSWORD`` (node id upper-cased, other characters as ``_``), falling
    back to ``{prefix}_USERNAME`` and ``{prefix}_PASSWORD``."""

    def __init__(
        self, prefix: str = "LOCKSTEP_BMC", environ: Mapping[str, str] | None = None
    ) -> None:
        self._prefix = prefix
        self._environ = os.environ if environ is None else environ

    def get(self, node_id: str) -> tuple[str, str]:
        for scope in (f"{self._prefix}_{_env_key(node_id)}", self._prefix):
            user = self._environ.get(f"{scope}_USERNAME")
            password = self._environ.get(f"{scope}_PASSWORD")
            if user and password is not None:
                return user, password
        raise CredentialError(
            f"no BMC credentials for {node_id} in environment ({self._prefix}_*_USERNAME/PASSWORD)"
        )


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True)

    username: str
    password: SecretStr


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True)

    default: _Entry | None = None
    nodes: dict[str, _Entry] = {}


class FileCredentials:
    """Credentials from a JSON file (e.g. a mounted secret)::

        {"default": {"username": "u", "password": "p"},
         "nodes": {"node-00001": {"username": "u1", "password": "p1"}}}

    The file is read once; malformed files raise :class:`CredentialError` naming the field.
    """

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        try:
            raw = json.loads(self._path.read_text())
            self._data = _File.model_validate(raw)
        except OSError as exc:
            raise CredentialError(f"{self._path}: cannot read: {exc.strerror}") from None
        except json.JSONDecodeError:
            raise CredentialError(f"{self._path}: not valid JSON") from None
        except ValidationError as exc:
            first = exc.errors(include_input=False, include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "file"
            raise CredentialError(f"{self._path}: {where}: {first['msg']}") from None

    def get(self, node_id: str) -> tuple[str, str]:
        entry = self._data.nodes.get(node_id, self._data.default)
        if entry is None:
            raise CredentialError(f"no BMC credentials for {node_id} in {self._path}")
        return entry.username, entry.password.get_secret_value()


def reference_problem(reference: str) -> str | None:
    """Why the registry reference ``reference`` cannot be used here (None: it can).

    A ``file:`` reference must name a regular file only its owner may read or write, as ssh
    insists for a private key (``StrictModes``): a missing file, a directory, or a secret
    readable by group or others is refused when a fleet is imported, not found unreadable on
    every BMC at the next sweep. Its content is checked the way a sweep reads it. An ``env:``
    reference names variables of the process that sweeps; their absence is reported per node
    by the sweep. The reason names the path, never a value.
    """
    kind, _, where = reference.partition(":")
    if kind != "file":
        return None
    problem = _file_problem(Path(where))
    return None if problem is None else f"{reference}: {problem}"


def _file_problem(path: Path) -> str | None:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot read: {exc.strerror}"
    if not stat.S_ISREG(mode):
        return "is a directory, not a credentials file" if stat.S_ISDIR(mode) else "not a file"
    if mode & 0o077:
        return (
            f"group or others may read it (mode {stat.S_IMODE(mode):04o}); it holds secrets: "
            f"chmod 600 {path}"
        )
    try:
        FileCredentials(path)
    except CredentialError as exc:
        return str(exc).removeprefix(f"{path}: ")
    return None


class RegistryCredentials:
    """Credentials by each node's registry reference (``env:PREFIX`` or ``file:/path``).

    Each reference is resolved once; a file that cannot be read makes only its nodes
    unusable (with the reason), never every node (a whole sweep).
    """

    def __init__(
        self, references: Mapping[str, str], environ: Mapping[str, str] | None = None
    ) -> None:
        self._references = dict(references)
        self._environ = environ
        self._sources: dict[str, CredentialSource | str] = {}  # str: why it cannot be used

    def _resolve(self, reference: str) -> CredentialSource:
        kind, _, where = reference.partition(":")
        if kind == "env":
            return EnvCredentials(where, self._environ)
        if kind == "file":
            return FileCredentials(where)
        raise CredentialError(f"unknown credential reference kind {kind!r}")

    def _source(self, reference: str) -> CredentialSource:
        if reference not in self._sources:
            try:
                self._sources[reference] = self._resolve(reference)
            except CredentialError as exc:
                self._sources[reference] = str(exc)
        source = self._sources[reference]
        if isinstance(source, str):
            raise CredentialError(source)  # a fresh one: a shared instance grows its traceback
        return source

    def get(self, node_id: str) -> tuple[str, str]:
        reference = self._references.get(node_id)
        if reference is None:
            raise CredentialError(f"{node_id} has no credential reference")
        return self._source(reference).get(node_id)
