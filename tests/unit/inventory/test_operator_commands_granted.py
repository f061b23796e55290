"""Every operator command the inventory's app answers is one its NATS identity may answer: the
permission matrix grants the subjects ``router.ANSWERS`` lists (``lockstep_cli.catalog``), and a
command missing there gets 'no responders' on an authenticated stack while every test against an
open server passes (fleet.import and fleet.sweep did, caught by the walkthrough)."""

from __future__ import annotations

import pytest

from lockstep_common.dlq_commands import DLQ_COMMANDS
from lockstep_inventory import router
from lockstep_inventory.app import create_app
from lockstep_inventory.settings import Settings

pytestmark = pytest.mark.unit


def test_every_command_the_app_answers_is_granted() -> None:
    app = create_app(Settings(sweep_interval_s=0))
    answered = {c.request for c in app._operator_commands}  # what start() binds
    assert answered, "the inventory answers operator commands"
    # Every service answers about its dead letters (ServiceApp; granted to every service).
    common = {c.request for c in DLQ_COMMANDS}
    assert answered - common <= set(router.ANSWERS)
    assert {c.answer for c in app._operator_commands} - {c.answer for c in DLQ_COMMANDS} <= set(
        router.EMITS
    )
