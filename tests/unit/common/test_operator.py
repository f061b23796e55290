"""Operator commands: who asked comes from the subject, and what each identity may run."""

from __future__ import annotations

import pytest

from lockstep_common import subjects
from lockstep_common.asyncapi import Route, replies_to
from lockstep_common.events.v1 import FleetStatusAnswered, FleetStatusRequested
from lockstep_common.identities import ADMIN, AGENT, CLI, READER
from lockstep_common.operator import Command, parse_subject, refusal_for
from lockstep_common.subjects import Namespace

NS = Namespace("lockstep")


async def _run(*args: object) -> FleetStatusAnswered:
    raise AssertionError("not run here")


READ = Command("fleet.status", FleetStatusRequested, FleetStatusAnswered, _run)
WRITE = Command("fleet.remove", FleetStatusRequested, FleetStatusAnswered, _run, writes=True)


def test_the_asker_and_the_command_are_read_from_the_subject() -> None:
    wire = NS.wire(subjects.ops_request(READER, "inventory", "fleet.status"))
    assert wire == "lockstep.ops.reader.inventory.fleet.status"
    assert parse_subject(NS, "inventory", wire) == (READER, "fleet.status")
    for bad in (
        "lockstep.ops.reader.planner.fleet.status",  # another service's command
        "lockstep.ops.reader.inventory",  # no command
        "lockstep.fleet.query",
    ):
        with pytest.raises(ValueError):
            parse_subject(NS, "inventory", bad)
    with pytest.raises(ValueError, match="namespace"):
        parse_subject(NS, "inventory", "staging.ops.cli.inventory.fleet.status")


def test_an_identity_cannot_be_spelt_to_look_like_another() -> None:
    """A token with a dot would shift the tokens: `cli.x` must never be an identity."""
    for forged in ("cli.x", "*", ">", "cli x", ""):
        with pytest.raises(ValueError, match="subject token"):
            subjects.ops_request(forged, "inventory", "fleet.remove")
    with pytest.raises(ValueError, match="subject token"):
        subjects.ops_request(CLI, "inventory", "fleet.>")


def test_the_reader_reads_cli_and_admin_also_write_nobody_else_runs_anything() -> None:
    assert refusal_for(READER, READ) is None
    reason = refusal_for(READER, WRITE)
    assert reason is not None and "may only read" in reason and "fleet.remove" in reason
    for identity in (CLI, ADMIN):
        assert refusal_for(identity, READ) is None and refusal_for(identity, WRITE) is None
    for identity in (AGENT, "inventory", "planner"):
        assert refusal_for(identity, READ) == f"identity {identity!r} may not run operator commands"


def test_a_family_reply_answers_every_command_of_the_family_and_nothing_else() -> None:
    def route(subject: str, *, reply: bool = False) -> Route:
        return Route(lambda: subject, (), (), reply)

    refused = route("ops.PARAM-identity.PARAM-service.PARAM-command", reply=True)
    assert replies_to(refused, route("ops.PARAM-identity.inventory.fleet.list"))
    assert replies_to(refused, route("ops.PARAM-identity.planner.rollout.start"))
    assert not replies_to(refused, route("admission.check"))
    assert not replies_to(refused, route("ops.PARAM-identity"))
    answer = route("ops.PARAM-identity.inventory.fleet.list", reply=True)
    assert replies_to(answer, route("ops.PARAM-identity.inventory.fleet.list"))
    assert not replies_to(answer, route("ops.PARAM-identity.inventory.fleet.show"))
