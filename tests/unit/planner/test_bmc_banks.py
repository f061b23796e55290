"""The plan's reversible -> one-way ordering asks the BMC profile, not the manifest (issue 29,
item 2): firmware a bundle calls A/B is one-way where the BMC of its hardware profile keeps no
previous image to run again (NVIDIA: a flip-back is a re-flash; Supermicro: only BMC and BIOS
have a backup bank), so a plan of a class that forbids one-way work says so before approval; a
hardware profile with no BMC profile configured keeps the bundle's declaration."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from pydantic import ValidationError

from lockstep_common.canonical import canonical_json
from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.envelope import make_envelope
from lockstep_common.events.v1 import FleetNode, WavePlanned
from lockstep_common.vocabulary import ChangeClass, Component
from lockstep_planner.adapters.policy_file import packaged_policy
from lockstep_planner.domain.fleet import ComponentKind
from lockstep_planner.domain.intake import bundle_of
from lockstep_planner.domain.rollout import WaveState
from lockstep_planner.handlers import on_bundle_attested, rollout_id_of
from lockstep_planner.lifecycle import Timing, _emit_release
from lockstep_planner.planning import Planning, decide
from lockstep_planner.settings import Settings
from lockstep_planner.store import IntentRow, WaveRow
from lockstep_planner.testing.kit import attested, fleet_node, image, intent
from lockstep_planner.testing.memory_store import MemoryStore
from lockstep_redfish.profile import profile_named

pytestmark = pytest.mark.unit
GPU, BMC = Component.GPU_VBIOS, Component.BMC


HASHED = frozenset(
    {"change_class", "stack", "seed", "waves", "strata", "excluded", "max_unavailable"}
    | {"fabric_domains_at_once"}
)
"""The keys of a stored plan that ``plan_hash.canonical_plan`` hashes, besides ``reflash``."""


def planning(**bmc_profiles: str) -> Planning:
    return Planning(
        packaged_policy(),
        8,
        Timing(),
        {},
        rules=packaged_rules(),
        bmc_profiles={hw: profile_named(p) for hw, p in bmc_profiles.items()},
    )


def kinds(p: Planning, *extra: str) -> dict[str, ComponentKind]:
    parts = [image(GPU, "2", activation="reset"), image(BMC, "2", activation="reset")]
    parts += [image(BMC, "2", activation="reset", profile=hw) for hw in extra]
    return {c.name: c.kind for c in bundle_of("s" * 64, parts, p.reversible).components}


def test_the_bmc_profile_decides_whether_ab_firmware_is_reversible() -> None:
    ab, one_way = ComponentKind.AB_FIRMWARE, ComponentKind.ONE_WAY_FIRMWARE
    assert kinds(planning()) == {"gpu_vbios": ab, "bmc": ab}  # no BMC known: the manifest's
    assert kinds(planning(gb200="nvidia-gb200-nvl")) == {"gpu_vbios": one_way, "bmc": one_way}
    assert kinds(planning(gb200="dmtf-generic")) == {"gpu_vbios": one_way, "bmc": one_way}
    assert kinds(planning(gb200="supermicro-x13")) == {"gpu_vbios": one_way, "bmc": ab}
    # One image for two hardware profiles: one-way if either BMC cannot run it again.
    mixed = planning(gb200="supermicro-x13", **{"hgx-h100": "nvidia-hgx"})
    assert kinds(mixed, "hgx-h100")["bmc"] is one_way


async def gpu_intent(change_class: ChangeClass) -> tuple[MemoryStore, IntentRow, list[FleetNode]]:
    """A planner store that knows an attested bundle of one GPU image (A/B, activated by a
    reset), a dry-run intent of ``change_class`` for it, and a fleet of 12 nodes."""
    store = MemoryStore()
    bundle = attested(image(GPU, "97.00.9A.00.01", activation="reset"))
    async with store.transaction() as tx:
        await on_bundle_attested(tx, make_envelope(bundle, source="/t"), now=store.now)
    asked = intent(bundle, change_class=change_class, dry_run=True)
    row = IntentRow(asked.intent_id, uuid.uuid4(), rollout_id_of(asked.intent_id), asked, store.now)
    return store, row, [fleet_node(i) for i in range(12)]


@pytest.mark.parametrize(("bmc_profile", "refused"), [("nvidia-gb200-nvl", True), (None, False)])
async def test_a_plan_says_one_way_before_approval_where_the_bmc_keeps_no_previous_image(
    bmc_profile: str | None, refused: bool
) -> None:
    store, row, fleet = await gpu_intent(ChangeClass.ROUTINE)
    p = planning(gb200=bmc_profile) if bmc_profile else planning()
    async with store.transaction() as tx:
        decision = await decide(tx, row, fleet, p, store.now)
    one_way = (
        "change class routine does not allow one-way components (gpu_vbios); use a class that "
        "does (power_fabric)"
    )
    assert (one_way in decision.reasons) is refused, decision.reasons
    assert (decision.rollout is None) is refused


def test_an_unknown_bmc_profile_is_refused_at_start_naming_the_known() -> None:
    with pytest.raises(ValidationError, match=r"no BMC profile 'dell' \(known: dmtf-generic, "):
        Settings(bmc_profiles={"gb200": "dell"})
    assert Settings(bmc_profiles={"gb200": "supermicro-x13"}).bmc_profiles == {
        "gb200": "supermicro-x13"
    }


async def test_the_plan_says_a_tripped_gate_re_flashes_and_its_hash_covers_it() -> None:
    """A/B firmware the BMC cannot run again is flipped back by a forced downgrade: the plan
    lists it under ``reflash`` before approval, inside the hash each approval is bound to, and
    each released wave hands it to the updater; without a BMC profile the plan says nothing
    and hashes as it did before the field."""
    store, row, fleet = await gpu_intent(ChangeClass.POWER_FABRIC)
    plans = {}
    for name, p in (("known", planning(gb200="nvidia-gb200-nvl")), ("unknown", planning())):
        async with store.transaction() as tx:
            decision = await decide(tx, row, fleet, p, store.now)
        assert decision.rollout is not None, decision.reasons
        plans[name] = decision.rollout
    known, unknown = plans["known"], plans["unknown"]
    assert known.plan["reflash"] == ["gpu_vbios"]
    assert "reflash" not in unknown.plan
    hashed = {k: v for k, v in known.plan.items() if k in HASHED}
    assert hashlib.sha256(canonical_json(hashed)).hexdigest() != known.plan_hash
    assert hashlib.sha256(canonical_json({**hashed, "reflash": ["gpu_vbios"]})).hexdigest() == (
        known.plan_hash
    )
    wave = WaveRow(known.rollout_id, 0, WaveState.PENDING, ("n",), ("gpu_vbios",), 1, 0, 0, 0)
    async with store.transaction() as tx:
        env = _emit_release(tx, known, wave)
    assert isinstance(env.data, WavePlanned) and env.data.reflash == (GPU,)
