"""Canonical JSON and the stack hash: defined once, used by attest, planner and inventory.

Canonical JSON follows RFC 8785 (JSON Canonicalization Scheme) for the values Lockstep signs:
objects with members sorted by the UTF-16 code units of their names (RFC 8785 section 3.2.3),
no insignificant white space, UTF-8, strings escaped as ECMAScript does (which ``json.dumps``
with ``ensure_ascii=False`` matches: short escapes for \\b \\f \\n \\r \\t, ``\\u00xx`` for other
control characters). Numbers are restricted to integers: a manifest has no use for floats, and
refusing them avoids the number-formatting half of RFC 8785 (section 3.2.2.3) altogether.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

K = TypeVar("K", bound=str)  # component names, plain or as the Component str-enum


class CanonicalJsonError(ValueError):
    """A value that has no canonical JSON form here (a float, a non-string key, ...)."""


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 bytes of ``value`` (dicts, lists, str, int, bool, None)."""
    parts: list[str] = []
    _emit(value, parts, "$")
    return "".join(parts).encode("utf-8")


def _emit(value: Any, out: list[str], where: str) -> None:
    if value is None or isinstance(value, bool | str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        raise CanonicalJsonError(f"{where}: floats are not allowed in canonical JSON ({value!r})")
    elif isinstance(value, Mapping):
        keys = list(value)
        for key in keys:
            if not isinstance(key, str):
                raise CanonicalJsonError(f"{where}: object key {key!r} is not a string")
        out.append("{")
        for i, key in enumerate(sorted(keys, key=lambda k: k.encode("utf-16-be"))):
            if i:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _emit(value[key], out, f"{where}.{key}")
        out.append("}")
    elif isinstance(value, Sequence):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _emit(item, out, f"{where}[{i}]")
        out.append("]")
    else:
        raise CanonicalJsonError(f"{where}: {type(value).__name__} has no JSON form")


def stack_hash(stack: Mapping[str, Mapping[K, str]]) -> str:
    """The golden stack's identity: SHA-256 over the canonical JSON of profile -> component ->
    version, lower-case hex.

    Only versions are hashed, because versions are what a node reports and what admission
    checks compare; the bits behind each version are bound by the signed manifest's digests.
    """
    return hashlib.sha256(canonical_json({"profiles": stack})).hexdigest()
