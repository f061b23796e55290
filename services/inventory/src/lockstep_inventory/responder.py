"""The inventory's request/reply workers: the shared ``lockstep_common.responder``, where it
moved when operator commands came to answer the same way (kept so imports here stay short)."""

from __future__ import annotations

from lockstep_common.responder import Answer, Responder, decode, refuse

__all__ = ["Answer", "Responder", "decode", "refuse"]
