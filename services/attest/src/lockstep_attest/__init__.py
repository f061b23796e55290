"""Lockstep attest:

verifies bundles (signatures, digests, RIMs, S.A.F.E. reports) before anything is staged."""
