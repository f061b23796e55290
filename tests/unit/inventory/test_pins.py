"""Pins: which one covers a node, selectors, and pinning version sets."""

from __future__ import annotations

import datetime as dt

import pytest

from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.events.v1 import DriftItem, ScopeSelector
from lockstep_common.vocabulary import Component
from lockstep_inventory.domain.drift import classify
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.members import versions_of
from lockstep_inventory.domain.pins import Pin, SelectorError, parse_selector, pin_of, stack_of
from lockstep_redfish.profile import profile_named

pytestmark = pytest.mark.unit
C = Component
T0 = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
NODE = NodeEntry(
    id="n1",
    bmc_url="http://127.0.0.1:8000",
    profile="gb200",
    site="ams1",
    pool="train",
    fabric_domain="nvl-0",
    credentials="env:BMC",
)


def pin(hash_char: str, sequence: int, minutes: int = 0, **scope: tuple[str, ...]) -> Pin:
    return Pin(
        site="ams1",
        scope=ScopeSelector(**scope),
        stack_hash=hash_char * 64,
        stack={"gb200": {C.BMC: hash_char}},
        sequence=sequence,
        occurred_at=T0 + dt.timedelta(minutes=minutes),
    )


def test_the_covering_pin_latest_in_the_stream_wins() -> None:
    site_wide = pin("a", 1)
    pool = pin("b", 5, pools=("train",))
    other_pool = pin("c", 9, pools=("infer",))
    assert pin_of(NODE, [site_wide, pool, other_pool]) is pool
    newest = pin("d", 10)
    assert pin_of(NODE, [newest, pool]) is newest
    assert pin_of(NODE, [other_pool]) is None
    other_site = Pin("fra2", ScopeSelector(), "e" * 64, {}, 99, T0)
    assert pin_of(NODE, [other_site, site_wide]) is site_wide


def test_the_senders_time_decides_nothing() -> None:
    # Issue 15: a pin dated far ahead won against every pin after it. The broker's order wins.
    dated_ahead = pin("a", 3, minutes=10**6)
    later_in_stream = pin("b", 4, minutes=-60, pools=("train",))
    assert pin_of(NODE, [dated_ahead, later_in_stream]) is later_in_stream


def test_a_stack_without_the_profile_pins_nothing() -> None:
    assert pin("a", 0).pinned("hgx-h100") is None
    assert pin("a", 0).pinned("gb200") == {C.BMC: "a"}


def test_selector_parsing() -> None:
    assert parse_selector("site=ams1,pool=train,pool=batch,node=n1") == ScopeSelector(
        sites=("ams1",), pools=("train", "batch"), nodes=("n1",)
    )
    assert parse_selector("") == ScopeSelector()
    for bad, says in [
        ("rack=r1", "unknown key"),
        ("site", "expected key=value"),
        ("site=", "expected key=value"),
        ("site=a b", "characters"),
    ]:
        with pytest.raises(SelectorError, match=says):
            parse_selector(bad)


def test_a_version_set_pins_a_board_whose_members_differ_by_design() -> None:
    members = {"CPLDMB_0": "0.2.1.8", "CPLDMID_0": "0.2.1.1", "FW_BMC_0": "b"}
    grouped = versions_of(members, profile_named("lockstep-sim"))
    stack = stack_of(grouped.versions, grouped.conflicts)
    assert stack == {C.CPLD: "0.2.1.1|0.2.1.8", C.BMC: "b"}
    conflicts = {C.CPLD: {"CPLDMB_0": "0.2.1.8", "CPLDMID_0": "0.2.1.1"}}
    assert _classify({C.BMC: "b"}, stack, conflicts) == ()
    # One CPLD reflashed to the other's image: the members agree now, unlike the pinned set.
    items = _classify({C.BMC: "b", C.CPLD: "0.2.1.1"}, stack, {})
    assert [(i.component, str(i.kind)) for i in items] == [(C.CPLD, "unexpected")]


def _classify(
    actual: dict[Component, str],
    stack: dict[Component, str],
    conflicts: dict[Component, dict[str, str]],
) -> tuple[DriftItem, ...]:
    return classify(
        actual,
        stack,
        in_active_wave=False,
        recorded_change=False,
        profile="x",
        today=T0.date(),
        conflicts=conflicts,
        rules=packaged_rules(),
    )
