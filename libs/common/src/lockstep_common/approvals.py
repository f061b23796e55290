"""What an approver signs: a fixed, domain-separated message naming the rollout and its plan
hash (Ed25519, RFC 8032), so a signature for one rollout or plan can be used for no other.

Shared by ``lockstep rollout approve``, which signs on the approver's machine (the key never
leaves it), and the planner, which verifies against its trust store
(``lockstep_planner.domain.approvals``).
"""

from __future__ import annotations

PREFIX = b"lockstep-approval-v1\n"


def approval_message(rollout_id: str, plan_hash: str) -> bytes:
    """The bytes an approver signs."""
    return PREFIX + f"rollout {rollout_id}\nplan {plan_hash}\n".encode()
