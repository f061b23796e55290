"""Preflight by the BMC's profile, before any drain: each refusal is one line naming the BMC,
the profile and what is missing; a BMC the profile can flash gets none."""

from __future__ import annotations

import dataclasses

import pytest

from lockstep_common.vocabulary import Component
from lockstep_redfish.errors import UpdateRefused
from lockstep_redfish.preflight import (
    Intent,
    offered_push_methods,
    profile_refusals,
    push_method,
    refuse_if_any,
)
from lockstep_redfish.probe import report
from lockstep_redfish.profile import LoginMethod, PushMethod, profile_named
from lockstep_redfish.selection import BmcFacts, Selection, select_profile
from tests.unit.redfish.test_profiles import capture_facts

OPERATOR = frozenset({"Login", "ConfigureComponents", "ConfigureSelf"})
GPU_UP = Intent(Component.GPU_VBIOS, "97.00.9A.00.01", 50_000_000)
GB200 = "BMC n1 (profile nvidia-gb200-nvl)"


def _check(
    facts: BmcFacts,
    *intents: Intent,
    login: LoginMethod = LoginMethod.SESSION,
    privileges: frozenset[str] | None = OPERATOR,
    approved: bool = False,
    selection: Selection | None = None,
) -> list[str]:
    selection = selection or select_profile(facts)
    return profile_refusals(
        "n1",
        selection,
        facts,
        intents,
        login=login,
        privileges=privileges,
        rollback_approved=approved,
    )


def test_a_bmc_its_profile_can_flash_is_not_refused() -> None:
    facts = capture_facts("nvidia_gb200")
    assert _check(facts, GPU_UP, Intent(Component.BMC)) == []
    assert push_method(select_profile(facts).profile, facts.update_service) is PushMethod.MULTIPART


def test_an_account_without_the_privilege_is_refused() -> None:
    lines = _check(capture_facts("nvidia_gb200"), GPU_UP, privileges=frozenset({"Login"}))
    assert lines == [
        f"{GB200}: the account lacks what the profile's calls need (DSP8011: ConfigureComponents "
        "for the UpdateService push (multipart), Chassis.Reset of /redfish/v1/Chassis/BMC_0, "
        "UpdateService #NvidiaUpdateService.CommitImage; it holds: Login)"
    ]
    unknown = _check(capture_facts("nvidia_gb200"), GPU_UP, privileges=None)
    assert unknown == [
        f"{GB200}: the account's privileges cannot be read; the profile's calls need "
        "ConfigureComponents, Login"
    ]


def test_an_administrator_class_account_is_refused_as_the_updater_refuses_it() -> None:
    admin = OPERATOR | {"ConfigureManager", "ConfigureUsers"}
    lines = _check(capture_facts("nvidia_gb200"), GPU_UP, privileges=admin)
    assert lines == [
        f"{GB200}: the account holds ConfigureManager and ConfigureUsers, more than the "
        "profile's calls need: Administrator-class credentials are refused; use an account "
        "whose role holds only ConfigureComponents, Login"
    ]


def test_a_login_the_profile_does_not_allow_is_refused() -> None:
    lines = _check(capture_facts("nvidia_gb200"), GPU_UP, login=LoginMethod.BASIC)
    assert lines == [f"{GB200}: login by basic is not allowed by the profile (allowed: session)"]
    smc = OPERATOR | {"ConfigureManager"}  # its Manager.Reset needs it (DSP8011)
    assert _check(capture_facts("supermicro_hgx"), login=LoginMethod.BASIC, privileges=smc) == []


def test_a_component_no_member_holds_is_refused() -> None:
    lines = _check(capture_facts("nvidia_gb200"), GPU_UP, Intent(Component.BBU))
    assert lines == [f"{GB200}: no FirmwareInventory member holds bbu"]


def test_a_bmc_lacking_the_profiles_push_method_is_refused() -> None:
    facts = capture_facts("nvidia_gb200")
    service = {k: v for k, v in (facts.update_service or {}).items() if k != "MultipartHttpPushUri"}
    lines = _check(dataclasses.replace(facts, update_service=service), GPU_UP)
    assert lines == [
        f"{GB200}: the BMC offers none of the profile's push methods "
        "(multipart; it offers: http_push)"
    ]
    chosen = select_profile(facts)  # a per-node override keeps the profile
    gone = _check(dataclasses.replace(facts, update_service=None), GPU_UP, selection=chosen)
    assert gone == [f"{GB200}: the BMC has no UpdateService"]


def test_an_image_over_max_image_size_is_refused() -> None:
    big = dataclasses.replace(GPU_UP, image_size=209_715_201)
    lines = _check(capture_facts("nvidia_gb200"), big)
    assert lines == [
        f"{GB200}: the gpu_vbios image is 209715201 bytes, "
        "over the BMC's MaxImageSizeBytes 209715200"
    ]


def test_a_downgrade_needs_a_signed_approval_and_a_profile_that_can_force_it() -> None:
    down = Intent(Component.GPU_VBIOS, "97.00.00.00.01")
    lines = _check(capture_facts("nvidia_gb200"), down)
    assert len(lines) == 1
    assert lines[0].startswith(
        f"{GB200}: gpu_vbios would be downgraded (HGX_FW_GPU_0 97.00.6C.00.03"
    )
    assert lines[0].endswith("without a signed rollback approval")
    assert _check(capture_facts("nvidia_gb200"), down, approved=True) == []  # ForceUpdate
    smc = _check(
        capture_facts("supermicro_hgx"),
        Intent(Component.BMC, "10.00.00"),
        approved=True,
        privileges=OPERATOR | {"ConfigureManager"},
    )
    assert smc == [
        "BMC n1 (profile supermicro-x13): bmc would be downgraded (BMC 11.01.01 -> 10.00.00) "
        "and the profile allows no downgrade"
    ]
    # DSP0268 has no force flag: under the standard alone an approved downgrade is an ordinary
    # update (the read-back decides), and an unapproved one is still refused.
    generic = Selection(profile_named("dmtf-generic"), (), ())
    smc_down = Intent(Component.BMC, "10.00.00")
    assert _check(capture_facts("supermicro_hgx"), smc_down, approved=True, selection=generic) == []
    (unapproved,) = _check(capture_facts("supermicro_hgx"), smc_down, selection=generic)
    assert unapproved.endswith("without a signed rollback approval")


def test_every_problem_is_named_at_once_and_raised_as_one_refusal() -> None:
    lines = _check(
        capture_facts("nvidia_gb200"),
        Intent(Component.BBU),
        login=LoginMethod.BASIC,
        privileges=frozenset(),
    )
    assert len(lines) == 3 and all(line.startswith(f"{GB200}: ") for line in lines)
    with pytest.raises(UpdateRefused) as refused:
        refuse_if_any(lines)
    assert str(refused.value).splitlines() == lines
    refuse_if_any([])  # nothing to refuse: returns


def test_offered_push_methods_reads_the_update_service() -> None:
    assert offered_push_methods(None) == []
    assert offered_push_methods({"Actions": "garbage", "HttpPushUri": 7}) == []
    viking = capture_facts("nvidia_viking").update_service
    assert offered_push_methods(viking) == [PushMethod.MULTIPART, PushMethod.SIMPLE_UPDATE]


def test_the_probe_says_how_each_profile_takes_an_older_image() -> None:
    facts = capture_facts("supermicro_hgx")

    def said(profile_id: str) -> str:
        chosen = Selection(profile_named(profile_id), (), ())
        found = report("n1", chosen, facts, login=LoginMethod.SESSION, privileges=OPERATOR)
        return found.downgrade

    assert said("nvidia-hgx") == "ForceUpdate, only under a signed rollback approval"
    assert said("dmtf-generic").startswith("sent as any update (the standard has no force flag)")
    assert said("supermicro-x13") == "refused: the profile allows none"
