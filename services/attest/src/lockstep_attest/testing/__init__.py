"""Test fixtures that other tests and the bundle builder reuse (never imported at runtime)."""
