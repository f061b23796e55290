"""What a change class allows, checked against an intent (issue 10, deliverables 2 and 3).

Each function returns the reasons to refuse, empty when the class allows the change, so the
planner can name every reason at once. Approvals are checked separately and last, because an
approval is bound to the plan's hash and so can only exist once the plan does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lockstep_common.vocabulary import ChangeClass
from lockstep_planner.domain.classes import ClassPolicy
from lockstep_planner.domain.fleet import ONE_WAY_KINDS, BundleComponent


def bundle_refusals(
    change_class: ChangeClass,
    policy: ClassPolicy,
    components: Iterable[BundleComponent],
    *,
    current: Mapping[str, str] | None,
    tested_revert: bool,
) -> list[str]:
    """Reasons the class does not allow moving to ``components``.

    Args:
        change_class: the intent's class (named in the reasons).
        policy: that class's policy.
        components: the target bundle's components.
        current: component name -> version pinned now, needed for a standard change's window.
        tested_revert: a tested revert is recorded for this change.
    """
    reasons: list[str] = []
    components = list(components)
    one_way = [c.name for c in components if c.kind in ONE_WAY_KINDS]
    if one_way and not policy.one_way_allowed:
        reasons.append(
            f"change class {change_class} does not allow one-way components "
            f"({', '.join(one_way)}); use a class that does (power_fabric)"
        )
    if policy.tested_revert_required and not tested_revert:
        reasons.append(
            f"change class {change_class} requires a tested revert before the first push"
        )
    if policy.window is not None:
        reasons.extend(_window_refusals(change_class, policy, components, current))
    return reasons


def _window_refusals(
    change_class: ChangeClass,
    policy: ClassPolicy,
    components: list[BundleComponent],
    current: Mapping[str, str] | None,
) -> list[str]:
    window = policy.window
    assert window is not None  # noqa: S101 - the caller checked
    if current is None:
        return [
            f"change class {change_class}: the pinned versions are unknown, so the window "
            "cannot be checked"
        ]
    reasons: list[str] = []
    for c in components:
        before = current.get(c.name)
        if before == c.version:
            continue
        where = f"{c.name} {before or '(absent)'} -> {c.version}"
        if c.kind not in window.kinds:
            reasons.append(f"{where}: {c.kind} components are outside the {change_class} window")
        elif c.name not in window.components:
            reasons.append(f"{where}: {c.name} is outside the {change_class} window")
        elif c.name in window.same_branch and (
            before is None or before.split(".", 1)[0] != c.version.split(".", 1)[0]
        ):
            reasons.append(
                f"{where}: leaves the pinned branch; only changes within it are "
                f"pre-approved as {change_class}"
            )
    return reasons


def approval_shortfall(
    change_class: ChangeClass, policy: ClassPolicy, approvers: Iterable[str]
) -> str | None:
    """Why the (already verified) approvals of a plan are not enough, or None when they are.

    Args:
        approvers: who signed each valid approval of this plan's hash, one entry per approval.
    """
    signed = list(approvers)
    need = policy.approvals.count
    have = len(set(signed)) if policy.approvals.distinct_approvers else len(signed)
    if have >= need:
        return None
    kind = "distinct approvers" if policy.approvals.distinct_approvers else "approvals"
    return f"change class {change_class} needs {need} {kind}; the plan has {have}"
