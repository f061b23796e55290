"""Recorded sample files: what is accepted, and bad rows named in one line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lockstep_gate.sample_files import SampleFileError, read_samples

pytestmark = pytest.mark.unit
HEADER = "node,group,metric,value,time\n"


def write(tmp_path: Path, text: str, name: str = "s.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_csv_rows_with_iso_or_epoch_times_and_empty_values(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "node,group,metric,value,time,stratum,phase\n"
        "n1,canary,busbw,370.5,2026-01-01T00:00:10Z,gb200,soak\n"
        "n2,control,busbw,,1767225600,gb200,baseline\n"
        "n2,control,busbw,NaN,1767225610.5,gb200,\n",
    )
    table = read_samples(path)
    assert table.nodes == ("n1", "n2") and table.strata == ("gb200",)
    assert table.time.tolist() == [1767225610.0, 1767225600.0, 1767225610.5]
    assert table.value[0] == 370.5 and math.isnan(table.value[1]) and math.isnan(table.value[2])
    assert table.baseline.tolist() == [False, True, False]
    assert table.node_canary.tolist() == [True, False]


def test_json_rows_with_null_values_and_default_stratum(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[{"node": "n1", "group": "canary", "metric": "m", "value": null, "time": 5},'
        ' {"node": "n2", "group": "control", "metric": "m", "value": 2,'
        ' "time": "1970-01-01T00:00:06+00:00"}]',
        "s.json",
    )
    table = read_samples(path)
    assert table.strata == ("all",) and table.time.tolist() == [5.0, 6.0]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "the CSV file has no header row"),
        (HEADER, "no samples"),
        ("node,group,metric,value\nn1,canary,m,1\n", "line 2: missing field(s) time"),
        ("node,grp,metric,value,time\nn1,canary,m,1,0\n", "line 2: unknown field(s) grp"),
        (HEADER + "n1,canery,m,1,0\n", "line 2: group 'canery' is neither canary nor control"),
        (HEADER + "n1,canary,m,fast,0\n", "line 2: value 'fast' is not a number"),
        (HEADER + "n1,canary,m,1,2026-01-01T00:00:00\n", "has no time zone"),
        (HEADER + "n1,canary,m,1,yesterday\n", "time 'yesterday' is neither seconds nor ISO 8601"),
        (HEADER + "n1,canary,m,1,inf\n", "time 'inf' is not finite"),
        (HEADER + "n1,canary,m,1,0,extra\n", "line 2: more cells than header columns"),
        (HEADER + "n.1,canary,m,1,0\n", "line 2: node 'n.1' is not a node id"),
        (
            HEADER + "n1,canary,m,1,0\nn1,control,m,1,0\n",
            "line 3: node n1 is in both canary and control",
        ),
        ("node,group,metric,value,time,phase\nn1,canary,m,1,0,after\n", "phase 'after' is neither"),
    ],
)
def test_bad_csv_is_one_line_naming_the_row(tmp_path: Path, text: str, says: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SampleFileError) as caught:
        read_samples(path)
    assert str(caught.value).startswith(f"samples {path}: ") and says in str(caught.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not valid JSON"),
        ('{"node": "n1"}', "JSON samples must be a list of objects"),
        ("[1]", "sample 1: not an object"),
        (
            '[{"node": "n1", "group": "canary", "metric": "m", "value": true, "time": 0}]',
            "value True is not a number",
        ),
        (
            '[{"node": 7, "group": "canary", "metric": "m", "value": 1, "time": 0}]',
            "node must be text",
        ),
    ],
)
def test_bad_json_is_one_line_naming_the_sample(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(SampleFileError, match=says):
        read_samples(write(tmp_path, text, "s.json"))


def test_two_strata_for_one_node_are_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path, "node,group,metric,value,time,stratum\nn1,canary,m,1,0,a\nn1,canary,m,1,1,b\n"
    )
    with pytest.raises(SampleFileError, match="node n1 is in two strata"):
        read_samples(path)


def test_an_absent_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SampleFileError, match="cannot be read: No such file"):
        read_samples(tmp_path / "absent.csv")
