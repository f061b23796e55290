"""Why each move of the node step machine happens, for the diagram in docs/updater.md.

``lockstep docs generate`` draws the diagram from ``steps.ALLOWED`` and takes the words on its
arrows from here; a label for a move the table does not allow fails generation
(``lockstep_common.statediagram.Machine``).
"""

from __future__ import annotations

ENTRY = "wave.planned"
"""What creates a work item (the arrow into ``pending``)."""

LABELS: dict[tuple[str, str], str] = {
    ("pending", "preflight"): "claimed (token + 1)",
    ("preflight", "staging"): "some target not at the version",
    ("preflight", "cordoning"): "GSP remedy, the node not aligned (nothing to stage)",
    ("preflight", "done"): "already at the target, nothing written",
    ("preflight", "cancelled"): "rollout halted",
    ("preflight", "failed"): "refused (outside the plan, below LowestSupportedVersion, bad image)",
    ("staging", "cordoning"): "A/B images staged while the node works",
    ("staging", "done"): "every target found at the version, nothing written",
    ("staging", "cancelled"): "rollout halted",
    ("cordoning", "cordoning"): "waiting for the pool's out-of-service budget",
    ("cordoning", "draining"): "budget held, committed under the pool's lock",
    ("cordoning", "cancelled"): "rollout halted",
    ("cordoning", "failed"): "refused",
    ("draining", "draining"): "jobs still running",
    ("draining", "activating"): "drained",
    ("draining", "in_band"): "GSP remedy drained",
    ("draining", "uncordoning"): "halted, drain deadline, or a foreign drain",
    ("activating", "awaiting_bmc"): "activated (one-way parts written now)",
    ("activating", "uncordoning"): "halted before anything was activated",
    ("awaiting_bmc", "verifying"): "the BMC answers",
    ("awaiting_bmc", "quarantined"): "the BMC did not come back",
    ("verifying", "in_band"): "firmware verified, driver package to install",
    ("verifying", "uncordoning"): "every target reads back the version",
    ("verifying", "quarantined"): "not verified (unchanged, downgraded, other)",
    ("in_band", "in_band"): "rebooting, or the next call of the unit",
    ("in_band", "uncordoning"): "verified (or back on the previous known-good branch)",
    ("in_band", "quarantined"): "both branches failed, or Secure Boot rejected the module",
}
