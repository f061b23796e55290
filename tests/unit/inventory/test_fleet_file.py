"""The fleet file: validated whole, secrets refused, the simulator's list accepted."""

from __future__ import annotations

import json

import pytest

from lockstep_inventory.domain.fleet_file import FleetFileError, parse_fleet

pytestmark = pytest.mark.unit

NODE = {
    "id": "gb200-r01-n01",
    "bmc_url": "https://10.0.0.1",
    "profile": "gb200",
    "supplier": "acme",
    "site": "iad1",
    "rack": "r01",
    "fabric_domain": "nvl72-r01",
    "pool": "train-a",
    "credentials": "env:LOCKSTEP_BMC",
}


def test_yaml_with_nodes_and_a_bare_json_list_both_parse() -> None:
    yaml_text = "nodes:\n  - " + "\n    ".join(f"{k}: {v}" for k, v in NODE.items())
    (from_yaml,) = parse_fleet(yaml_text)
    (from_json,) = parse_fleet(json.dumps([NODE]))
    assert from_yaml == from_json and from_yaml.credentials == "env:LOCKSTEP_BMC"


def test_the_simulators_fleet_list_takes_a_default_credential_reference() -> None:
    sim = [{k: v for k, v in NODE.items() if k != "credentials"}]
    (node,) = parse_fleet(json.dumps(sim), default_credentials="file:/etc/lockstep/bmc.json")
    assert node.credentials == "file:/etc/lockstep/bmc.json"
    with pytest.raises(FleetFileError, match=r"nodes\[0\] \(gb200-r01-n01\): credentials"):
        parse_fleet(json.dumps(sim))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"password": "hunter2"}, "carries a username/password"),
        ({"credentials": "hunter2"}, "a secret itself is never accepted"),
        ({"id": "node.1"}, r"nodes\[0\].*id:"),
        ({"bmc_url": "ftp://x"}, "bmc_url"),
        ({"site": ""}, "site"),
        ({"colour": "blue"}, "colour: Extra inputs are not permitted"),
    ],
)
def test_bad_nodes_are_refused_naming_the_field_and_never_the_secret(
    change: dict[str, str], message: str
) -> None:
    with pytest.raises(FleetFileError, match=message) as err:
        parse_fleet(json.dumps([{**NODE, **change}]))
    assert "hunter2" not in str(err.value)


def test_duplicate_ids_and_empty_files_are_refused() -> None:
    with pytest.raises(FleetFileError, match="appears twice"):
        parse_fleet(json.dumps([NODE, NODE]))
    with pytest.raises(FleetFileError, match="non-empty list"):
        parse_fleet("nodes: []")
    with pytest.raises(FleetFileError, match="not YAML or JSON"):
        parse_fleet("nodes: [")


def test_a_bmc_url_with_credentials_in_it_is_refused() -> None:
    node = {
        "id": "n1",
        "bmc_url": "https://root:hunter2@10.0.0.1",
        "profile": "gb200",
        "site": "s",
        "credentials": "env:B",
    }
    text = json.dumps([node])
    with pytest.raises(FleetFileError, match="must not carry credentials") as caught:
        parse_fleet(text)
    assert "hunter2" not in str(caught.value)


def test_plain_http_for_credentials_is_off_unless_the_entry_allows_it() -> None:
    (https,) = parse_fleet(json.dumps([NODE]))
    assert https.allow_plain_http is False
    lab = {**NODE, "bmc_url": "http://10.0.0.1:8000", "allow_plain_http": True}
    (node,) = parse_fleet("nodes:\n  - " + "\n    ".join(f"{k}: {v}" for k, v in lab.items()))
    assert node.allow_plain_http is True
    with pytest.raises(FleetFileError, match=r"nodes\[0\].*allow_plain_http"):
        parse_fleet(json.dumps([{**lab, "allow_plain_http": "sometimes"}]))


def test_every_bad_node_is_named_not_only_the_first() -> None:
    nodes = [
        {**NODE, "id": "a", "profile": "gb300"},
        NODE,
        {**NODE, "id": "b", "password": "x"},
        {**NODE, "id": "c", "bmc_url": "ftp://x"},
        NODE,
    ]
    with pytest.raises(FleetFileError) as err:
        parse_fleet(json.dumps(nodes), known_profiles={"gb200", "hgx-h100"})
    problems = err.value.problems
    assert len(problems) == 4
    assert problems[0].startswith("nodes[0] (a): profile 'gb300' is not in the compatibility")
    assert "known: gb200, hgx-h100" in problems[0]
    assert problems[1].startswith("nodes[2] (b) carries a username/password")
    assert problems[2].startswith("nodes[3] (c): bmc_url:")
    assert problems[3] == "nodes[4]: node id 'gb200-r01-n01' appears twice"
    assert str(err.value).startswith("4 invalid nodes: nodes[0] (a)")


def test_any_profile_is_accepted_when_no_rules_are_given() -> None:
    (node,) = parse_fleet(json.dumps([{**NODE, "profile": "gb300"}]))
    assert node.profile == "gb300"
