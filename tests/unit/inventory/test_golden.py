"""A golden stack from a known-good node: what it runs, or one line saying why it cannot serve."""

from __future__ import annotations

import datetime as dt

import pytest

from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.vocabulary import Component, ObservationSource
from lockstep_inventory.domain.golden import NotGolden, stack_of_node
from lockstep_inventory.domain.observation import Observation

pytestmark = pytest.mark.unit
C = Component
T0 = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)
REDFISH, AGENT = ObservationSource.REDFISH, ObservationSource.AGENT


def bmc(**fields: object) -> Observation:
    base: dict[str, object] = {
        "components": {C.BMC: "b1", C.GPU_VBIOS: "97.00"},
        "conflicts": {C.NIC: {"NIC_0": "28.1", "NIC_1": "32.1"}},
    }
    return Observation(REDFISH, 1, T0, **(base | fields))  # type: ignore[arg-type]


def agent(driver: str, gsp: str) -> Observation:
    return Observation(AGENT, 1, T0, components={C.DRIVER: driver, C.GPU_GSP: gsp})


def stack(*observations: Observation) -> dict[Component, str]:
    by_source = {o.source: o for o in observations}
    return stack_of_node("n1", "gb200", by_source, rules=packaged_rules(), today=T0.date())


def test_firmware_and_in_band_versions_make_the_stack_members_by_design_as_a_set() -> None:
    assert stack(bmc(), agent("580.65.06", "580.65.06")) == {
        C.BMC: "b1",
        C.DRIVER: "580.65.06",
        C.GPU_GSP: "580.65.06",
        C.GPU_VBIOS: "97.00",
        C.NIC: "28.1|32.1",
    }


@pytest.mark.parametrize(
    ("observations", "why"),
    [
        ((), "its BMC was never read"),
        ((agent("580.65.06", "580.65.06"),), "its BMC was never read"),
        ((bmc(readable=False, error="timed out"),), "unreadable (timed out)"),
        ((bmc(), agent("580.65.06", "570.86.10")), "not known-good: rule gsp_equals_driver"),
    ],
)
def test_a_node_that_cannot_vouch_for_a_stack_is_refused_saying_why(
    observations: tuple[Observation, ...], why: str
) -> None:
    with pytest.raises(NotGolden, match=why.replace("(", r"\(").replace(")", r"\)")):
        stack(*observations)
