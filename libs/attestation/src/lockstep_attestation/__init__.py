"""Attest's bundle builder and verifier as a library (issue 26): the signed manifest (JWS), the
vendors' evidence (COSE/CoRIM, SWID tags, SAFE), trust stores and key files, and the checks a
bundle passes or fails, pure but for reading local files. The attest service verifies submitted
bundles with it; ``lockstep bundle build|verify`` runs the same code on local files, without
importing the service.
"""
