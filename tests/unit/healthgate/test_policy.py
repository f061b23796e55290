"""The packaged policy loads; a bad policy file is refused in one line naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep_gate.policy import DEFAULT_FATAL_XIDS, FloorKind, Harmful, PolicyError
from lockstep_gate.policy_files import default_policy, load_policy

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parents[2] / "data" / "gate"


def test_the_default_policy_has_the_issues_hard_rules_and_ten_metrics() -> None:
    p = default_policy()
    assert p.hard_rules.fatal_xids == DEFAULT_FATAL_XIDS == (48, 63, 64, 74, 79, 92, 94, 95)
    assert p.hard_rules.busbw_factor == 0.92
    assert p.confidence == 0.98 and p.iqr_factor == 3.0
    assert len(p.metrics) == 10
    busbw = p.metric("nccl_busbw_gbps")
    assert (busbw.harmful, busbw.critical, busbw.floor_kind) == (
        Harmful.LOWER,
        True,
        FloorKind.RELATIVE,
    )
    assert busbw.floor_at(-370.0) == pytest.approx(7.4)


def test_a_policy_file_in_toml_or_json_loads(tmp_path: Path) -> None:
    assert [m.name for m in load_policy(DATA / "policy.toml").metrics] == [
        "nccl_busbw_gbps",
        "gpu_temperature_c",
    ]
    json_file = tmp_path / "p.json"
    json_file.write_text('{"metrics": [{"name": "x", "harmful": "higher", "floor": 0.5}]}')
    assert load_policy(json_file).metrics[0].name == "x"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("metrics = [", "not valid TOML"),
        ("confidence = 0.98", "metrics: Field required"),
        (
            "[[metrics]]\nname = 'x'\nharmful = 'up'\nfloor = 1",
            "metrics.0.harmful: Input should be",
        ),
        (
            "[[metrics]]\nname = 'x'\nharmful = 'lower'\nfloor = 1.5",
            "a relative floor must be below 1",
        ),
        (
            "[[metrics]]\nname = 'x'\nharmful = 'lower'\nfloor = -1",
            "metrics.0.floor: Input should be",
        ),
        (
            "[[metrics]]\nname = 'X Y'\nharmful = 'lower'\nfloor = 0.1",
            "metrics.0.name: String should",
        ),
        (
            "[[metrics]]\nname='x'\nharmful='lower'\nfloor=0.1\n[[metrics]]\nname='x'\n"
            "harmful='lower'\nfloor=0.2",
            "metric defined twice: x",
        ),
        (
            "pass_score = 50.0\nmarginal_score = 60.0\n[[metrics]]\nname='x'\nharmful='lower'\n"
            "floor=0.1",
            "marginal_score must not exceed pass_score",
        ),
        (
            "[expected.gb200]\nx = -3.0\n[[metrics]]\nname='x'\nharmful='lower'\nfloor=0.1",
            "expected.gb200.x must be a positive number",
        ),
        (
            "colour = 'red'\n[[metrics]]\nname='x'\nharmful='lower'\nfloor=0.1",
            "colour: Extra inputs are not permitted",
        ),
        (
            "[hard_rules]\nbusbw_factor = 1.5\n[[metrics]]\nname='x'\nharmful='lower'\nfloor=0.1",
            "hard_rules.busbw_factor: Input should be less than or equal to 1",
        ),
    ],
)
def test_a_bad_policy_is_one_line_naming_the_problem(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert message.startswith(f"policy {path}: ") and says in message
    assert "\n" not in message


def test_an_unreadable_policy_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot be read: No such file"):
        load_policy(tmp_path / "absent.toml")
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(PolicyError, match="the top level must be a table"):
        load_policy(listed)
