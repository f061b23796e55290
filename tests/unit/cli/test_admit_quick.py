"""``lockstep fleet admit``'s quick path says and reads exactly what the full path does, and
leaves to the full path everything out of the ordinary (issue 14, item 7)."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lockstep_cli import admit_quick, nats_request
from lockstep_cli.cli_io import stdout_console
from lockstep_cli.fleet_bus import admission_request
from lockstep_cli.fleet_views import admit_json, print_admit
from lockstep_cli.main import app
from lockstep_common import vocabulary
from lockstep_common.envelope import make_envelope, source_of
from lockstep_common.events import REGISTRY, v1
from lockstep_common.natsconn import NatsAccess
from lockstep_common.settings import ServiceSettings
from tests.unit.cli.fake_nats import fake_nats

pytestmark = pytest.mark.unit

HASH = "ab" * 32
NOW = dt.datetime(2026, 11, 25, 1, 2, 3, 456789, tzinfo=dt.UTC)


def answered(*nodes: v1.NodeAdmission) -> bytes:
    data = v1.AdmissionCheckAnswered(stack_hash=HASH, nodes=nodes)
    return make_envelope(data, source=source_of("inventory")).to_json()


REFUSED = v1.NodeAdmission(node_id="n2", admitted=False, reasons=("stale: [old] report", "x"))
OK = v1.NodeAdmission(node_id="n1", admitted=True)


def test_the_constants_are_those_of_the_models_and_settings() -> None:
    assert admit_quick.MAX_NODES == v1.MAX_NODES
    assert ServiceSettings.model_fields["namespace"].default == admit_quick.DEFAULT_NAMESPACE
    assert admit_quick.NODE_ID.pattern == vocabulary.TOKEN_PATTERN.strip("^$")
    assert source_of("cli") == admit_quick.SOURCE
    assert (v1.AdmissionCheckRequested.cloudevents_type(), 1) == admit_quick.REQUESTED
    assert (v1.AdmissionCheckAnswered.cloudevents_type(), 1) == admit_quick.ANSWERED


def test_the_request_is_the_envelope_the_models_write() -> None:
    body = admit_quick.request_body(HASH, ["n1", "node-2_b"], now=NOW)
    assert body is not None
    decoded = REGISTRY.decode(body, max_bytes=1 << 20)
    assert decoded.data == admission_request(HASH, ["n1", "node-2_b"])
    assert decoded.source == source_of("cli") and decoded.occurred_at == NOW
    model = make_envelope(
        decoded.data, source=source_of("cli"), event_id=decoded.event_id, occurred_at=NOW
    )
    assert json.loads(body) == json.loads(model.to_json())


@pytest.mark.parametrize(
    ("stack_hash", "ids"),
    [
        (HASH[:63], ["n1"]),  # not 64 hex digits
        (HASH.upper(), ["n1"]),
        (HASH, []),
        (HASH, ["bad.node"]),  # not a subject token
        (HASH, ["n"] * (v1.MAX_NODES + 1)),
    ],
)
def test_input_the_models_would_refuse_goes_to_the_full_path(
    stack_hash: str, ids: list[str]
) -> None:
    assert admit_quick.request_body(stack_hash, ids, now=NOW) is None


def test_the_answer_reads_as_the_full_path_shows_it() -> None:
    data = answered(OK, REFUSED)
    model = REGISTRY.decode(data, max_bytes=1 << 20).data
    assert isinstance(model, v1.AdmissionCheckAnswered)
    doc = admit_quick.answer_doc(data, None)
    assert doc == admit_json(model) and doc["admitted"] is False
    # On a pipe, the same lines print_admit writes through rich (markup-looking text intact).
    out = io.StringIO()
    print_admit(stdout_console(out), doc)
    assert admit_quick.plain_lines(doc) == out.getvalue().splitlines()
    assert admit_quick.plain_lines(doc)[1] == "n2  refused: stale: [old] report; x"


def test_an_error_reply_and_a_foreign_reply_are_named() -> None:
    with pytest.raises(admit_quick.ServiceRefused, match="refused the request: too many"):
        admit_quick.answer_doc(b'{"error": "too many"}', "too many")
    with pytest.raises(admit_quick.ServiceRefused, match="refused the request: hdr"):
        admit_quick.answer_doc(b"not json", "hdr")
    other = json.loads(answered(OK))
    other["type"] = "lockstep.drift.detected"
    with pytest.raises(admit_quick.BadReply, match="unexpected reply type"):
        admit_quick.answer_doc(json.dumps(other).encode(), None)
    broken = json.loads(answered(OK))
    broken["data"]["nodes"][0]["admitted"] = "yes"
    with pytest.raises(admit_quick.BadReply, match="not an admission answer"):
        admit_quick.answer_doc(json.dumps(broken).encode(), None)


def secret(tmp_path: Path) -> Path:
    path = tmp_path / "pw"
    path.write_text("s3cret\n")
    path.chmod(0o600)
    return path


def test_the_target_is_what_the_settings_give(tmp_path: Path) -> None:
    pw = secret(tmp_path)
    env = {
        "LOCKSTEP_NATS_URL": "nats://127.0.0.1:4300,nats://127.0.0.1:4301",
        "LOCKSTEP_NATS_USER": "cli",
        "LOCKSTEP_NATS_PASSWORD_FILE": str(pw),
        "LOCKSTEP_NAMESPACE": "staging",
        "LOCKSTEP_DATABASE_URL": "postgresql://u@127.0.0.1:1/x",
        "HOME": "/home/x",
    }
    assert admit_quick.target(env, tmp_path) == admit_quick.Target(
        NatsAccess(("nats://127.0.0.1:4300", "nats://127.0.0.1:4301"), "cli", pw, None),
        "staging.admission.check",
    )


@pytest.mark.parametrize(
    "extra",
    [
        {"LOCKSTEP_NATS_ULR": "nats://x:1"},  # misspelt: the full path warns about it
        {"LOCKSTEP_INVENTORY_ADMISSION_MAX_AGE_S": "60"},  # any other setting
        {"LOCKSTEP_NAMESPACE": "bad namespace"},
        {"LOCKSTEP_NATS_URL": "notaurl"},
        {"LOCKSTEP_NATS_URL": "ws://127.0.0.1:8080"},  # a transport the quick path lacks
        {"LOCKSTEP_NATS_USER": "cli"},  # a user without a password file
        {"LOCKSTEP_NATS_CA_FILE": "/nonexistent/ca.pem"},
    ],
)
def test_anything_else_goes_to_the_full_path(extra: dict[str, str], tmp_path: Path) -> None:
    env = {"LOCKSTEP_NATS_URL": "nats://127.0.0.1:4222", **extra}
    assert admit_quick.target(env, tmp_path) is None


@pytest.mark.parametrize(
    "other",
    [
        "LOCKSTEP_TEST_BACKEND",  # a test harness's
        "LOCKSTEP_PLANNER_DB_SCHEMA",  # another service's
        "LOCKSTEP_BMC_PASSWORD",  # a credential reference's (env:LOCKSTEP_BMC)
    ],
)
def test_variables_the_full_path_ignores_keep_the_quick_path(other: str, tmp_path: Path) -> None:
    env = {"LOCKSTEP_NATS_URL": "nats://127.0.0.1:4222", other: "x"}
    assert admit_quick.target(env, tmp_path) is not None


def test_a_group_readable_password_file_goes_to_the_full_path(tmp_path: Path) -> None:
    pw = secret(tmp_path)
    pw.chmod(0o640)
    env = {
        "LOCKSTEP_NATS_URL": "nats://127.0.0.1:4222",
        "LOCKSTEP_NATS_USER": "cli",
        "LOCKSTEP_NATS_PASSWORD_FILE": str(pw),
    }
    assert admit_quick.target(env, tmp_path) is None


def admit(monkeypatch: pytest.MonkeyPatch, url: str, *args: str) -> tuple[int, str]:
    for name in [n for n in os.environ if n.startswith("LOCKSTEP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LOCKSTEP_NATS_URL", url)
    result = CliRunner().invoke(
        app, ["fleet", "admit", "--stack-hash", HASH, "--nodes", "n1,n2", "--timeout", "5", *args]
    )
    return result.exit_code, result.output


def test_admit_asks_once_and_prints_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_nats(lambda _: (None, answered(OK, REFUSED)), ping_first=True) as (url, seen):
        code, out = admit(monkeypatch, url)
        code_json, out_json = admit(monkeypatch, url, "--json")
    assert code == 1 and out.splitlines() == ["n1  admitted", "n2  refused: stale: [old] report; x"]
    assert code_json == 1 and json.loads(out_json)["nodes"][0] == {
        "node_id": "n1",
        "admitted": True,
        "reasons": [],
    }
    subject, payload = seen.requests[0]
    assert subject == "lockstep.admission.check"
    assert json.loads(payload)["data"] == {"stack_hash": HASH, "node_ids": ["n1", "n2"]}
    assert seen.connects[0]["name"] == "lockstep-cli" and seen.connects[0]["no_responders"]


def test_admit_exits_3_when_nobody_answers_and_2_on_an_error_reply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with fake_nats(lambda _: None) as (url, _):
        code, out = admit(monkeypatch, url)
    assert code == 3
    assert "no answer on lockstep.admission.check within 5s (NoResponders)" in out
    with fake_nats(lambda _: ({"Lockstep-Error": "bad"}, b'{"error": "node_ids: bad"}')) as (
        url,
        _,
    ):
        code, out = admit(monkeypatch, url)
    assert code == 2 and "inventory refused the request: node_ids: bad" in out
    code, out = admit(monkeypatch, "nats://127.0.0.1:1")
    assert code == 3 and re.search(r"NATS at nats://127.0.0.1:1 unreachable: Unreachable", out)


def test_the_client_speaks_only_nats_and_tls() -> None:
    assert nats_request.supported(NatsAccess(("nats://a:1", "tls://b:2")))
    assert not nats_request.supported(NatsAccess(("nats://a:1", "wss://b:2")))
