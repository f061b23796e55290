"""The lighter collection checks say exactly what the pydantic models would say."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep_redfish.errors import RedfishReplyError
from lockstep_redfish.models import (
    Collection,
    SoftwareInventory,
    collection_members,
    is_reference,
    parse,
    parse_inventory,
)

pytestmark = pytest.mark.unit

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
