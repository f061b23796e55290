"""Signed CoRIM RIMs (COSE_Sign1 around 501(corim-map)) for tests and demo bundles."""

from __future__ import annotations

from typing import Any

import cbor2

from lockstep_attestation import corim, cose

COSE_SHA384 = -43


def signed_corim(
    sha384_hex: str, key: Any, *, kid: bytes = b"rim", corim_id: str = "fw-rim"
) -> bytes:
    """A CoRIM whose one reference triple measures ``sha384_hex``, signed ES384 by ``key``."""
    environment = {0: {1: "NVIDIA", 2: "GB200 VBIOS"}}
    measurement = {0: "firmware", 1: {2: [[COSE_SHA384, bytes.fromhex(sha384_hex)]]}}
    comid = {1: {0: f"{corim_id}-comid"}, 4: {0: [[environment, [measurement]]]}}
    corim_map = {0: corim_id, 1: [cbor2.CBORTag(506, cbor2.dumps(comid))]}
    payload = cbor2.dumps(cbor2.CBORTag(501, corim_map))
    return cose.sign1(payload, key, alg=-35, kid=kid, extra_protected={3: corim.CONTENT_TYPE})
