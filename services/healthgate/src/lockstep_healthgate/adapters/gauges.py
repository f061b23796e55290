"""The healthgate's gauges, read from its tables (``lockstep_common.query_gauges``): verdicts
recorded, by verdict and kind, waves by state, and each profile's stragglers."""

from __future__ import annotations

from lockstep_common.query_gauges import QueryGauge
from lockstep_common.vocabulary import GateVerdict

GAUGES = (
    QueryGauge(
        "lockstep_healthgate_verdicts_stored",
        "Gate verdicts recorded (one per wave, never deleted), by verdict and how it was"
        " reached (hard_rule at once, soak after the soak)",
        "SELECT verdict, kind, count(*) FROM verdicts GROUP BY verdict, kind",
        labels=("verdict", "kind"),
        fill=tuple((v.value, k) for v in GateVerdict for k in ("hard_rule", "soak")),
    ),
    QueryGauge(
        "lockstep_healthgate_waves",
        "Waves the gate watches, by state (updating, soaking, decided; closed ones aside)",
        "SELECT state, count(*) FROM waves WHERE state <> 'closed' GROUP BY state",
        labels=("state",),
        fill=(("updating",), ("soaking",), ("decided",)),
    ),
    QueryGauge(
        "lockstep_healthgate_stragglers",
        "Nodes of each hardware profile flagged as stragglers (busbw or SM clock outliers against"
        " their peers, outside rollouts) by the last evaluation",
        "SELECT profile, cardinality(node_ids) FROM stragglers",
        labels=("profile",),
    ),
)
