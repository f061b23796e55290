"""Canonical JSON (RFC 8785 subset) and the stack hash."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockstep_common.canonical import CanonicalJsonError, canonical_json, stack_hash
from lockstep_common.vocabulary import Component

pytestmark = pytest.mark.unit

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


def test_members_are_sorted_and_whitespace_is_gone() -> None:
    assert (
        canonical_json({"b": [1, 2], "a": {"y": True, "x": None}})
        == b'{"a":{"x":null,"y":true},"b":[1,2]}'
    )


def test_keys_sort_by_utf16_code_units_as_rfc8785_requires() -> None:
    # U+1F600 is D83D DE00 in UTF-16, which sorts before U+FB01 (FB01), unlike code points.
    assert canonical_json({"\ufb01": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ufb01":1}'.encode()


def test_strings_use_ecmascript_escapes_and_raw_utf8() -> None:
    assert canonical_json('é\n\u0001"\\') == '"é\\n\\u0001\\"\\\\"'.encode()


@pytest.mark.parametrize("bad", [1.5, {"a": float("nan")}, {1: "x"}, {"a": object()}])
def test_values_without_a_canonical_form_are_refused_naming_where(bad: object) -> None:
    with pytest.raises(CanonicalJsonError):
        canonical_json(bad)


@given(json_values)
def test_canonical_form_is_valid_json_that_round_trips_and_is_stable(value: object) -> None:
    encoded = canonical_json(value)
    assert json.loads(encoded) == value
    assert canonical_json(json.loads(encoded)) == encoded


def test_stack_hash_ignores_member_order_but_not_versions() -> None:
    a = {"gb200": {"bmc": "1.0", "driver": "580.95.05"}}
    b = {"gb200": {"driver": "580.95.05", "bmc": "1.0"}}
    c = {"gb200": {"bmc": "1.0", "driver": "580.95.06"}}
    assert stack_hash(a) == stack_hash(b)
    assert stack_hash(a) != stack_hash(c)
    assert len(stack_hash(a)) == 64


def test_stack_hash_is_the_same_for_component_enums_and_their_names() -> None:
    by_enum = stack_hash({"gb200": {Component.NIC: "1", Component.BMC: "2"}})
    assert by_enum == stack_hash({"gb200": {"bmc": "2", "nic": "1"}})
