"""Collections read with ``$expand=.($levels=1)`` where the service root advertises it (issue 28
item 3: a GB200 tray's 31 FirmwareInventory members were 31 GETs at every step), member by
member otherwise; a BMC that advertises it and answers links, some links, or an answer that is
not an expanded collection is still read right, never a document guessed."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, cast

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from lockstep_redfish.errors import BmcRefused, RedfishReplyError
from lockstep_redfish.expand import EXPAND, offers_expand, split_members
from lockstep_redfish.image import FirmwareImage
from lockstep_redfish.preflight import UpdateRequest
from lockstep_redfish.probe import read_facts
from lockstep_redfish.session import BmcSession
from lockstep_redfish.transport import Reply
from lockstep_redfish.update import FirmwareUpdate

pytestmark = pytest.mark.unit
FW = "/redfish/v1/UpdateService/FirmwareInventory"
GPUS = tuple(f"{FW}/GPU_{i}" for i in range(4))
ROOT = {"ProtocolFeaturesSupported": {"ExpandQuery": {"Levels": True, "NoLinks": True}}}


def member(path: str, version: str = "1") -> dict[str, Any]:
    name = path.rsplit("/", 1)[-1]
    return {"@odata.id": path, "Id": name, "Name": name, "Version": version}


def bmc_docs(expanded: Any = None) -> dict[str, Any]:
    docs: dict[str, Any] = {
        "/redfish/v1/UpdateService": {"MultipartHttpPushUri": "/push"},
        "/redfish/v1/Managers": {"Members": [{"@odata.id": "/redfish/v1/Managers/BMC_0"}]},
        FW: {"Members": [{"@odata.id": p} for p in GPUS]},
        **{p: member(p) for p in GPUS},
    }
    docs[FW + EXPAND] = (
        {"Members": [{**member(p), "@odata.etag": f'"{i}"'} for i, p in enumerate(GPUS)]}
        if expanded is None
        else expanded
    )
    return docs


class Bmc:
    """A BMC answering ``docs`` (a missing path: 404), counting what was asked."""

    def __init__(self, docs: dict[str, Any]) -> None:
        self.docs = docs
        self.asked: list[str] = []

    async def request(self, method: str, path: str, **_: Any) -> Reply:
        self.asked.append(path)
        if path not in self.docs:
            return Reply(404, CIMultiDictProxy(CIMultiDict()), None)
        # The collection's own ETag: never a member's.
        return Reply(200, CIMultiDictProxy(CIMultiDict(ETag='"collection"')), self.docs[path])

    async def get(self, path: str) -> Reply:
        reply = await self.request("GET", path)
        if reply.status != 200:
            raise BmcRefused(f"GET {path}: HTTP {reply.status}", url=path, status=reply.status)
        return reply

    async def reopen(self) -> None:
        raise AssertionError("not logged out")

    def url(self, path: str) -> str:
        return "https://bmc" + path


def test_expand_is_used_only_where_the_root_advertises_levels_and_no_links() -> None:
    assert offers_expand(ROOT)
    assert not offers_expand({})
    assert not offers_expand(None)
    levels_only = {"ProtocolFeaturesSupported": {"ExpandQuery": {"Levels": True}}}
    assert not offers_expand(levels_only)
    assert not offers_expand({"ProtocolFeaturesSupported": {"ExpandQuery": "yes"}})  # malformed


async def test_the_facts_are_read_in_one_request_where_advertised() -> None:
    bmc = Bmc(bmc_docs())
    facts = await read_facts(cast(BmcSession, bmc), ROOT)
    assert [m.id for m in facts.members] == ["GPU_0", "GPU_1", "GPU_2", "GPU_3"]
    assert [p for p in bmc.asked if p.startswith(FW)] == [FW + EXPAND]
    plain = Bmc(bmc_docs())
    same = await read_facts(cast(BmcSession, plain), {})  # not advertised: one GET each
    assert same.members == facts.members
    assert [p for p in plain.asked if p.startswith(FW)] == [FW, *GPUS]


@pytest.mark.parametrize(
    "answer",
    [
        {"Members": [{"@odata.id": p} for p in GPUS]},  # advertised, not done: links
        {"Members": [member(GPUS[0]), *({"@odata.id": p} for p in GPUS[1:])]},  # some
    ],
    ids=["links", "some-links"],
)
async def test_a_bmc_that_advertises_expand_and_answers_links_is_read_member_by_member(
    answer: dict[str, Any],
) -> None:
    bmc = Bmc(bmc_docs(answer))
    facts = await read_facts(cast(BmcSession, bmc), ROOT)
    assert [m.id for m in facts.members] == ["GPU_0", "GPU_1", "GPU_2", "GPU_3"]
    update = FirmwareUpdate(bmc, expand=True)
    read = await update.members(GPUS)
    assert {p: o.item.Version for p, o in read.items()} == dict.fromkeys(GPUS, "1")
    assert all(o.etag == '"collection"' for p, o in read.items() if p != GPUS[0])  # own GETs


@pytest.mark.parametrize(
    "answer",
    [
        None,  # refused (404 below): no answer to split
        ["not", "an", "object"],
        {"Members": "GPU_0"},
        {"Members": [member(GPUS[0]), "GPU_1"]},
        {"Members": [{"Id": "GPU_0", "Version": "9"}]},  # no @odata.id
        {"Members": [{**member(GPUS[0]), "@odata.id": "GPU_0"}]},  # not a path
        {"Members": [member(GPUS[0], "1"), member(GPUS[0], "9")]},  # one member, two versions
    ],
    ids=[
        "refused",
        "not-object",
        "members-not-list",
        "member-not-object",
        "no-id",
        "not-path",
        "twice",
    ],
)
async def test_an_answer_that_is_not_an_expanded_collection_is_read_again_member_by_member(
    answer: Any,
) -> None:
    docs = bmc_docs(answer)
    if answer is None:
        del docs[FW + EXPAND]
    bmc = Bmc(docs)
    facts = await read_facts(cast(BmcSession, bmc), ROOT)
    assert [(m.id, m.version) for m in facts.members] == [(p[-5:], "1") for p in GPUS]
    assert [p for p in bmc.asked if p.startswith(FW)] == [FW + EXPAND, FW, *GPUS]
    bmc.asked.clear()
    read = await FirmwareUpdate(bmc, expand=True).members(GPUS[:2])
    assert {p: o.item.Version for p, o in read.items()} == dict.fromkeys(GPUS[:2], "1")
    assert bmc.asked == [FW + EXPAND, *GPUS[:2]]


async def test_members_of_one_component_are_read_in_one_request_with_their_own_etags() -> None:
    bmc = Bmc(bmc_docs())
    read = await FirmwareUpdate(bmc, expand=True).members(GPUS[1:3])
    assert bmc.asked == [FW + EXPAND]
    assert {p: o.etag for p, o in read.items()} == {GPUS[1]: '"1"', GPUS[2]: '"2"'}
    bmc.asked.clear()
    await FirmwareUpdate(bmc).members(GPUS[1:3])  # not advertised: one GET each
    assert bmc.asked == list(GPUS[1:3])
    bmc.asked.clear()
    docs = bmc_docs({"Members": [member(GPUS[0]), {**member(GPUS[1]), "Version": 7}]})
    bmc = Bmc(docs)  # a member the schema refuses: its own GET says what it is
    read = await FirmwareUpdate(bmc, expand=True).members(GPUS[:3])
    assert {p: o.item.Version for p, o in read.items()} == dict.fromkeys(GPUS[:3], "1")
    assert bmc.asked == [FW + EXPAND, GPUS[1], GPUS[2]]


def test_split_members_names_what_is_wrong() -> None:
    url = "https://bmc" + FW + EXPAND
    with pytest.raises(RedfishReplyError, match=r"Members\[1\].@odata.id.*listed twice"):
        split_members({"Members": [member(GPUS[0]), member(GPUS[0], "9")]}, url)
    same = split_members({"Members": [member(GPUS[0]), {"@odata.id": GPUS[0]}]}, url)
    assert same == ({GPUS[0]: member(GPUS[0])}, [])


async def test_a_preflight_decides_on_the_documents_its_step_just_read() -> None:
    """Preflight's profile read (``read_facts``) holds the service and the members: the
    decision is the same as from reading them again, and nothing is read again; a target the
    read did not hold is read now."""
    bmc = Bmc(bmc_docs())
    facts = await read_facts(cast(BmcSession, bmc), ROOT)
    bmc.asked.clear()
    data = b"\x5a" * 64
    image = FirmwareImage(data, hashlib.sha384(data).hexdigest(), "gpu.fwpkg")
    request = UpdateRequest(GPUS[:2], "2")
    update = FirmwareUpdate(bmc, expand=True)
    plan = await update.preflight(image, request, read=facts)
    assert bmc.asked == []
    assert plan == await update.preflight(image, request)  # as read now
    bmc.asked.clear()
    gone = dataclasses.replace(facts, documents={GPUS[0]: facts.documents[GPUS[0]]})
    assert await update.preflight(image, request, read=gone) == plan
    assert bmc.asked == [GPUS[1]]
