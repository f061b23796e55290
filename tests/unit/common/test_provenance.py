"""Who may say what: a payload on another's subject, or an envelope naming someone who may not
publish it, is refused; the table of producers is the one the routers and channels declare."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lockstep_cli.catalog import consumers, producers
from lockstep_common import provenance, subjects
from lockstep_common.bus_access import SENDER_IDENTITIES
from lockstep_common.envelope import EventData, make_envelope
from lockstep_common.errors import InvalidMessage
from lockstep_common.events.v1 import GatePassed, GateTripped, HealthObserved
from lockstep_common.samples import samples
from lockstep_common.schemadocs import CHANNELS, pattern
from lockstep_common.vocabulary import GateVerdict
from tests.unit.common.nats_match import matches

pytestmark = pytest.mark.unit
AT = datetime(2026, 11, 29, 8, tzinfo=UTC)


def health(node: str) -> HealthObserved:
    return HealthObserved(node_id=node, site="ams1", observed_at=AT, heartbeat=1)


def test_a_report_for_another_node_than_its_subject_is_refused() -> None:
    env = make_envelope(health("can-2"), source="/lockstep/agent-can-2")
    provenance.check(env, subjects.health_observed("ams1", "can-2"))
    with pytest.raises(InvalidMessage, match=r"arrived on .*ctl-0 but its payload belongs on"):
        provenance.check(env, subjects.health_observed("ams1", "ctl-0"))
    with pytest.raises(InvalidMessage, match="belongs on"):  # another site, same node
        provenance.check(env, subjects.health_observed("fra1", "can-2"))


def test_a_source_that_may_not_publish_the_event_is_refused() -> None:
    subject = subjects.health_observed("ams1", "n1")
    for source in ("/lockstep/agent-n1", "/lockstep/agent-n1/2"):
        provenance.check(make_envelope(health("n1"), source=source), subject)
    # Another node's agent, the agents' template, the retired shared identity, a service.
    for source in (
        "/lockstep/agent-n2",
        "/lockstep/agent-n1x",
        "/lockstep/agent-<node>",
        "/lockstep/agent",
        "/lockstep/inventory",
        "/test",
    ):
        with pytest.raises(InvalidMessage, match="but only /lockstep/agent-n1 may publish it"):
            provenance.check(make_envelope(health("n1"), source=source), subject)


def test_a_verdict_whose_payload_says_another_verdict_than_its_subject_is_refused() -> None:
    passed = GatePassed(rollout_id="r1", wave=0, verdict=GateVerdict.TRIPPED, evidence=())
    env = make_envelope(passed, source="/lockstep/healthgate")
    with pytest.raises(InvalidMessage, match=r"belongs on gate\.tripped\.r1"):
        provenance.check(env, subjects.gate(GateVerdict.PASSED, "r1"))
    tripped = GateTripped(rollout_id="r2", wave=0, verdict=GateVerdict.TRIPPED, evidence=())
    other = make_envelope(tripped, source="/lockstep/healthgate")
    with pytest.raises(InvalidMessage, match=r"belongs on gate\.tripped\.r2"):
        provenance.check(other, subjects.gate(GateVerdict.TRIPPED, "r1"))


def _operator_command(cls: type[EventData]) -> bool:
    """Asked on ``ops.<identity>...``: the responder takes the identity from the subject the
    server checked (``lockstep_common.operator``), so it is not the consumers' table."""
    return CHANNELS[cls].senders == ("operators",)


def test_every_sample_event_belongs_on_a_subject_of_its_channel() -> None:
    for sample in samples():
        if CHANNELS[type(sample)].reply or _operator_command(type(sample)):
            continue
        assert matches(pattern(type(sample)), provenance.subject_of(sample)), type(sample)


def test_the_producers_are_those_the_routers_and_channels_declare() -> None:
    """The identities granted each subject, as bus_access derives them."""
    by_service = producers()
    for cls, channel in CHANNELS.items():
        if channel.reply or _operator_command(cls):
            continue
        declared = set(by_service.get(cls, ()))
        declared |= {i for sender in channel.senders for i in SENDER_IDENTITIES[sender]}
        assert set(provenance.PRODUCERS.get(cls, ())) == declared, cls.__name__


def test_everything_a_service_consumes_has_its_producers_and_subject() -> None:
    consumed: list[type[EventData]] = [
        c for c in consumers() if not CHANNELS[c].reply and not _operator_command(c)
    ]
    assert consumed
    for cls in consumed:
        assert provenance.PRODUCERS.get(cls), cls.__name__
        sample = next(s for s in samples() if type(s) is cls)
        provenance.subject_of(sample)  # raises when none is declared
