"""Builders for the planner's tests: inventory nodes, attested bundles, intents, verdicts."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from lockstep_common import canonical
from lockstep_common.approvals import approval_message
from lockstep_common.events.v1 import (
    AttestedComponent,
    BundleAttested,
    DriftItem,
    FleetNode,
    IntentSubmitted,
    MetricEvidence,
    ScopeSelector,
    Strategy,
)
from lockstep_common.vocabulary import ChangeClass, Component, DriftKind, Severity
from lockstep_planner.domain.approvals import Approval

OLD_DRIVER, NEW_DRIVER = "570.86.10", "570.124.06"


def fleet_node(i: int, **fields: Any) -> FleetNode:
    """A readable, conformant gb200 node running the old driver; override any field."""
    base: dict[str, Any] = {
        "node_id": f"n{i:03d}",
        "site": "site-a",
        "profile": "gb200",
        "supplier": "acme",
        "rack": f"r{i % 4}",
        "pool": "p0",
        "power_side": "A" if i % 2 else "B",
        "bmc_url": f"https://bmc-{i}.example",
        "credentials": "env:BMC",
        "readable": True,
        "observed": {Component.DRIVER: OLD_DRIVER, Component.GPU_GSP: OLD_DRIVER},
    }
    base.update(fields)
    return FleetNode.model_validate(base, strict=False)


def drifted(i: int) -> FleetNode:
    """A node with unexplained drift."""
    item = DriftItem(
        component=Component.BMC,
        expected="1.0",
        actual="0.9",
        kind=DriftKind.UNEXPECTED,
        severity=Severity.WARNING,
    )
    return fleet_node(i, drift=(item,))


def image(component: Component, version: str, **fields: Any) -> AttestedComponent:
    base: dict[str, Any] = {
        "profile": "gb200",
        "component": component,
        "version": version,
        "image": f"images/{component}-{version}.bin",
        "sha384": "0" * 96,
        "size": 1,
        "banks": "ab",
        "activation": "in_band",
    }
    base.update(fields)
    return AttestedComponent.model_validate(base, strict=False)


def attested(*components: AttestedComponent) -> BundleAttested:
    """A bundle moving the driver and GSP firmware within branch 570, unless given."""
    parts = components or (
        image(Component.DRIVER, NEW_DRIVER),
        image(Component.GPU_GSP, NEW_DRIVER),
    )
    stack: dict[str, dict[str, str]] = {}
    for c in parts:
        stack.setdefault(c.profile, {})[str(c.component)] = c.version
    return BundleAttested(
        bundle_id="gb200-driver",
        bundle_version="2026.03",
        stack_hash=canonical.stack_hash(stack),
        checks=(),
        bundle_uri="file:///bundles/gb200-driver",
        components=parts,
    )


def intent(
    bundle: BundleAttested,
    *,
    change_class: ChangeClass = ChangeClass.STANDARD,
    intent_id: uuid.UUID | None = None,
    **fields: Any,
) -> IntentSubmitted:
    """An intent moving every node to ``bundle`` (scope and strategy may be given)."""
    return IntentSubmitted(
        intent_id=intent_id or uuid.uuid4(),
        stack_hash=bundle.stack_hash,
        scope=fields.pop("scope", ScopeSelector()),
        change_class=change_class,
        submitted_by="alice",
        strategy=fields.pop("strategy", Strategy()),
        **fields,
    )


def evidence(metric: str = "nccl_busbw_ratio", *, passed: bool = True) -> MetricEvidence:
    return MetricEvidence(
        metric=metric,
        treatment=0.8 if not passed else 1.0,
        control=1.0,
        p_value=0.001 if not passed else 0.5,
        passed=passed,
        detail="Mann-Whitney U",
    )


def sign(key: Ed25519PrivateKey, approver: str, rollout_id: str, plan_hash: str) -> Approval:
    """What `lockstep rollout approve` sends for ``approver`` holding ``key``."""
    signature = key.sign(approval_message(rollout_id, plan_hash))
    return Approval(approver, plan_hash, base64.b64encode(signature).decode())
