"""Compatibility rules of a node's software tuple, shared by every service that judges a stack
(issue 10: "the same rules inventory judges drift by, shared rather than copied").

- ``table``: the table's schema and strict parser (CUDA major -> driver floor, toolkit minimum
  driver, driver branches, GPU architectures per profile, "equal to the driver" invariants).
- ``rules``: :func:`~lockstep_common.compatibility.rules.check_compatibility`, pure.
- ``items``: the one way a drift item is built, each kind's severity.
- ``files``: the packaged table (``data/compatibility.json``) or an operator's, read at start.
"""
