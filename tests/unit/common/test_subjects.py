"""Subject builders, namespaces, and which stream stores each subject."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lockstep_common import subjects, topology
from lockstep_common.events import REGISTRY
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import DeviceOutcome, GateVerdict

from .nats_match import matches, overlap

pytestmark = pytest.mark.unit

R, S, N = "r-2026-11-21-a", "iad1", "gb200-r07-n03"

# (built subject, the subject design.md's catalogue lists, the stream base that stores it)
CATALOGUE: list[tuple[str, str, str | None]] = [
    (subjects.bundle_submitted(), "bundle.submitted", "BUNDLES"),
    (subjects.bundle_attested(), "bundle.attested", "BUNDLES"),
    (subjects.bundle_rejected(), "bundle.rejected", "BUNDLES"),
    (subjects.intent_submitted(), "intent.submitted", "INTENTS"),
    (subjects.rollout_planned(R), f"rollout.planned.{R}", "ROLLOUTS"),
    (subjects.rollout_halted(R), f"rollout.halted.{R}", "ROLLOUTS"),
    (subjects.rollout_completed(R), f"rollout.completed.{R}", "ROLLOUTS"),
    (subjects.wave_planned(R), f"wave.planned.{R}", "ROLLOUTS"),
    (subjects.wave_completed(R), f"wave.completed.{R}", "ROLLOUTS"),
    (subjects.pin_changed(S), f"pin.changed.{S}", "PINS"),
    (subjects.device(DeviceOutcome.STAGED, R, N), f"device.staged.{R}.{N}", "DEVICES"),
    (subjects.device(DeviceOutcome.ACTIVATED, R, N), f"device.activated.{R}.{N}", "DEVICES"),
    (subjects.device(DeviceOutcome.VERIFIED, R, N), f"device.verified.{R}.{N}", "DEVICES"),
    (subjects.device(DeviceOutcome.FAILED, R, N), f"device.failed.{R}.{N}", "DEVICES"),
    (subjects.device(DeviceOutcome.ROLLED_BACK, R, N), f"device.rolled_back.{R}.{N}", "DEVICES"),
    (subjects.gate(GateVerdict.PASSED, R), f"gate.passed.{R}", "GATES"),
    (subjects.gate(GateVerdict.TRIPPED, R), f"gate.tripped.{R}", "GATES"),
    (subjects.gate(GateVerdict.INCONCLUSIVE, R), f"gate.inconclusive.{R}", "GATES"),
    (subjects.inventory_observed(S, N), f"telemetry.observed.inventory.{S}.{N}", "TELEMETRY"),
    (subjects.health_observed(S, N), f"telemetry.observed.health.{S}.{N}", "TELEMETRY"),
    (subjects.drift_detected(S, N), f"drift.detected.{S}.{N}", "DRIFT"),
    (subjects.drift_resolved(S, N), f"drift.resolved.{S}.{N}", "DRIFT"),
    (subjects.admission_check(), "admission.check", None),  # request/reply on core NATS
    (
        subjects.dead_letter(subjects.drift_detected(S, N)),
        f"dlq.drift.detected.{S}.{N}",
        "DLQ",
    ),
    (subjects.dead_letter(subjects.bundle_submitted()), "dlq.bundle.submitted", "DLQ"),
]
STORED = [(built, base) for built, _, base in CATALOGUE if base is not None]

# Each builder, given one bad token in one position, and the name the error must use for it.
BUILDERS: list[tuple[Callable[[str], str], str]] = [
    (subjects.rollout_planned, "rollout id"),
    (subjects.wave_completed, "rollout id"),
    (subjects.pin_changed, "site"),
    (lambda bad: subjects.device(DeviceOutcome.STAGED, bad, N), "rollout id"),
    (lambda bad: subjects.device(DeviceOutcome.STAGED, R, bad), "node id"),
    (lambda bad: subjects.gate(GateVerdict.TRIPPED, bad), "rollout id"),
    (lambda bad: subjects.inventory_observed(bad, N), "site"),
    (lambda bad: subjects.health_observed(S, bad), "node id"),
    (lambda bad: subjects.drift_detected(S, bad), "node id"),
    (lambda bad: subjects.drift_resolved(bad, N), "site"),
    (lambda bad: Namespace(bad).name, "namespace"),
]
BAD_TOKENS = ["n1.n2", "n*", ">", "n 1", "", "x" * 65, "-leading-dash", "tab\tbed", "n1\n"]


@pytest.mark.parametrize(("built", "expected", "base"), CATALOGUE, ids=[c[1] for c in CATALOGUE])
def test_builder_produces_the_catalogue_subject(
    built: str, expected: str, base: str | None
) -> None:
    assert built == expected


def test_device_outcomes_match_the_device_event_types() -> None:
    device_types = {c.event_type for c in REGISTRY.classes() if c.event_type.startswith("device.")}

    assert {f"device.{o.value}" for o in DeviceOutcome} == device_types


def test_gate_verdicts_match_the_gate_event_types() -> None:
    gate_types = {c.event_type for c in REGISTRY.classes() if c.event_type.startswith("gate.")}

    assert {f"gate.{v.value}" for v in GateVerdict} == gate_types


@pytest.mark.parametrize("bad", BAD_TOKENS, ids=repr)
@pytest.mark.parametrize(
    ("build", "what"), BUILDERS, ids=[f"{i}-{w}" for i, (_, w) in enumerate(BUILDERS)]
)
def test_token_that_cannot_be_a_subject_token_is_refused_naming_what_it_is(
    build: Callable[[str], str], what: str, bad: str
) -> None:
    with pytest.raises(ValueError, match="cannot be a NATS subject token") as caught:
        build(bad)

    assert f"{what} {bad!r}" in str(caught.value)


@pytest.mark.parametrize("good", ["a", "x" * 64, "gb200-r07-n03", "r_2026_11", "9lives"])
def test_tokens_of_letters_digits_dash_underscore_up_to_64_chars_are_accepted(good: str) -> None:
    assert subjects.drift_detected(S, good) == f"drift.detected.{S}.{good}"


def test_dead_letter_refuses_a_dead_letter() -> None:
    with pytest.raises(ValueError, match="refusing to dead-letter a dead letter"):
        subjects.dead_letter("dlq.drift.detected.iad1.n1")


# --- namespaces -------------------------------------------------------------------------------


def test_namespace_wire_prefixes_and_logical_strips_the_namespace() -> None:
    ns = Namespace("staging")
    logical = subjects.drift_detected(S, N)

    assert ns.wire(logical) == f"staging.drift.detected.{S}.{N}"
    assert ns.logical(ns.wire(logical)) == logical


@pytest.mark.parametrize(
    "foreign",
    [
        "lockstep.drift.detected.iad1.n1",  # another deployment
        "stagingx.drift.detected.iad1.n1",  # same letters, different token
        "drift.detected.iad1.n1",  # not namespaced at all
        "staging",
    ],
)
def test_namespace_logical_rejects_a_foreign_subject(foreign: str) -> None:
    with pytest.raises(ValueError, match=r"is not in namespace 'staging'"):
        Namespace("staging").logical(foreign)


def test_namespace_names_streams_and_durables() -> None:
    assert Namespace("lockstep").stream("DRIFT") == "LOCKSTEP_DRIFT"
    assert Namespace("blue-green").stream("DRIFT") == "BLUE_GREEN_DRIFT"
    assert Namespace("lockstep").durable("inventory-drift") == "lockstep-inventory-drift"
    assert Namespace("staging").durable("inventory-drift") != Namespace("lockstep").durable(
        "inventory-drift"
    )


# --- streams ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("built", "base"), STORED, ids=[s[0] for s in STORED])
def test_stream_for_maps_each_subject_to_its_stream(built: str, base: str) -> None:
    assert topology.stream_for(Namespace("lockstep"), built) == f"LOCKSTEP_{base}"
    assert topology.stream_for(Namespace("staging"), built) == f"STAGING_{base}"


@pytest.mark.parametrize(
    "subject",
    [subjects.admission_check(), "nothing.here", "bundle", "drift", "dlq"],
)
def test_stream_for_raises_for_a_subject_no_stream_stores(subject: str) -> None:
    with pytest.raises(ValueError, match="no stream stores subject"):
        topology.stream_for(Namespace("lockstep"), subject)


@pytest.mark.parametrize(("built", "base"), STORED, ids=[s[0] for s in STORED])
def test_each_stored_subject_is_matched_by_exactly_one_stream_pattern(
    built: str, base: str
) -> None:
    matching = [
        (spec.base, pattern)
        for spec in topology.EVENT_STREAMS
        for pattern in spec.subjects
        if matches(pattern, built)
    ]

    assert [b for b, _ in matching] == [base]


def test_admission_requests_are_not_captured_by_any_stream() -> None:
    # A stream on the request subject would answer the request with a JetStream PubAck.
    patterns = [p for spec in topology.EVENT_STREAMS for p in spec.subjects]

    assert not [p for p in patterns if matches(p, subjects.admission_check())]


def test_stream_patterns_do_not_overlap() -> None:
    patterns = [(spec.base, p) for spec in topology.EVENT_STREAMS for p in spec.subjects]

    clashes = [
        (a, b) for i, (_, a) in enumerate(patterns) for _, b in patterns[i + 1 :] if overlap(a, b)
    ]

    assert clashes == []
