"""Unit tests of the attest service's pure verification modules."""
