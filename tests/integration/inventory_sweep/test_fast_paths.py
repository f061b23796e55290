"""The sweeper's lighter checks say exactly what the pydantic models would say, and
``sweep_gc`` restores the collector's settings."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from lockstep_inventory.adapters.redfish_model import (
    Collection,
    RedfishReplyError,
    SoftwareInventory,
    collection_members,
    is_reference,
    parse,
    parse_inventory,
)
from lockstep_inventory.adapters.sweeper import sweep_gc

URL = "http://bmc/redfish/v1/UpdateService/FirmwareInventory"
GOOD = {"@odata.id": f"{URL}/A", "Id": "A", "Name": "A", "Version": "1.0"}


def _message(call: Any) -> str:
    with pytest.raises(RedfishReplyError) as info:
        call()
    return str(info.value)


@pytest.mark.parametrize(
    "body",
    [[], {}, {"Members": None}, {"Members": 3}, {"Members": {"a": 1}}, {"Members": [GOOD, 1]}],
)
def test_collection_members_fails_as_the_model_does(body: Any) -> None:
    assert _message(lambda: collection_members(body, URL)) == _message(
        lambda: parse(Collection, body, URL)
    )


def test_collection_members_passes_what_the_model_passes() -> None:
    body = {"Members": [GOOD, {"@odata.id": f"{URL}/B"}], "Oem": {}}
    assert collection_members(body, URL) == parse(Collection, body, URL).Members


@pytest.mark.parametrize(
    "bad",
    [
        {"Version": 3},
        {"Id": None},
        {"Status": {"Health": 1}},
        {"Status": "OK"},
        {"Updateable": "yes"},
        {"@odata.id": 7},
    ],
)
def test_parse_inventory_fails_as_per_member_parsing_does(bad: dict[str, Any]) -> None:
    members = [GOOD, {**GOOD, **bad}]
    expected = _message(lambda: parse(SoftwareInventory, members[1], URL, "Members[1]"))
    assert _message(lambda: parse_inventory(members, URL)) == expected


def test_parse_inventory_equals_per_member_parsing() -> None:
    members: list[dict[str, Any]] = [GOOD, {**GOOD, "Id": "B", "Status": {"Health": "OK"}}]
    expected = [parse(SoftwareInventory, m, URL, f"Members[{i}]") for i, m in enumerate(members)]
    assert parse_inventory(members, URL) == expected


def test_is_reference() -> None:
    assert is_reference({"@odata.id": "/x"})
    assert is_reference({})
    assert not is_reference(GOOD)
    assert not is_reference({"Id": "A"})


def test_sweep_gc_restores_the_collector() -> None:
    before = gc.get_threshold()
    with sweep_gc(young=12_345):
        assert gc.get_threshold()[0] == 12_345
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
