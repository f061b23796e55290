"""Signed approvals bound to a plan (issue 10, deliverable 3: "Approvals are records signed by
an approver key in a configured approvers trust store; an approval is bound to the rollout's
plan hash, so a changed plan needs a new approval").

An approval is an Ed25519 signature (RFC 8032) over a fixed, domain-separated message naming
the rollout and its plan hash, so a signature for one rollout or plan can be used for no other.
Ed25519 is deterministic: the same approver approving the same plan twice produces the same
bytes, so a replay is recognised by its signature and counts once. Signatures are compared
as the bytes they decode to, never as text: base64 has more than one spelling of the same bytes
(RFC 4648 section 3.5, non-zero pad bits; the decoder accepts them), so a replay re-encoded is
still a replay.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

# What is signed is shared with the CLI that signs it.
from lockstep_common.approvals import approval_message


@dataclass(frozen=True, slots=True)
class Approval:
    """What ``lockstep rollout approve`` hands the planner."""

    approver: str
    plan_hash: str
    signature: str
    """Base64 of the 64-byte Ed25519 signature."""


def refusal(
    approval: Approval,
    *,
    rollout_id: str,
    plan_hash: str,
    keys: Mapping[str, Ed25519PublicKey],
    seen: Iterable[str],
) -> str | None:
    """Why ``approval`` does not count for this plan, or None when it does.

    Args:
        keys: the approvers trust store, approver name -> public key.
        seen: signatures already counted for this rollout (base64, as stored).
    """
    key = keys.get(approval.approver)
    if key is None:
        return f"approver {approval.approver!r} is not in the approvers trust store"
    if approval.plan_hash != plan_hash:
        return (
            f"the approval is for plan {approval.plan_hash[:16]}, but the rollout's plan is "
            f"{plan_hash[:16]}: a changed plan needs a new approval"
        )
    try:
        raw = base64.b64decode(approval.signature, validate=True)
    except (binascii.Error, ValueError):
        return "the signature is not base64"
    if raw in {_decoded(s) for s in seen}:
        return f"replayed: this approval by {approval.approver} is already counted"
    try:
        key.verify(raw, approval_message(rollout_id, plan_hash))
    except InvalidSignature:
        return f"forged or corrupt: the signature does not verify with {approval.approver}'s key"
    return None


def canonical(signature: str) -> str:
    """The one base64 spelling of a signature's bytes (what is stored once it counted)."""
    return base64.b64encode(_decoded(signature)).decode()


def _decoded(signature: str) -> bytes:
    try:
        return base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        return b""  # stored before validation: never equal to a signature that verifies
