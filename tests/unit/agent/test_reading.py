"""The node's in-band state for the updater's ``read-state``, from real ``dkms status`` output
and probe readings: each phase the in-band step decides on, and the updater's own decision
(``next_call``) on what the agent reads."""

from __future__ import annotations

import pytest

from lockstep_agent.probes.diagnostics import DcgmDiag, Diagnostics
from lockstep_agent.probes.dkms import DkmsFacts, parse_status
from lockstep_agent.probes.files import FileFacts
from lockstep_agent.probes.node import NodeFacts
from lockstep_agent.probes.nvml import GpuFacts, NvmlFacts
from lockstep_agent.reading import node_reading
from lockstep_common.events.v1 import NodeCommandAnswered
from lockstep_updater.adapters.node_agent_nats import as_state
from lockstep_updater.domain.inband import Call, next_call
from tests.reference import REFERENCE

pytestmark = pytest.mark.unit
ISSUES = REFERENCE / "node-agent" / "issues"
OLD, NEW = "535.86.05", "580.65.06"
KERNEL = "6.5.0-060500rc5-generic"  # the running kernel of the captured dkms status


def _facts(dkms: str, loaded: str | None, dirs: tuple[str, ...], gsp: str | None) -> NodeFacts:
    gpus = (GpuFacts(index=0, gsp_firmware=gsp),) if loaded else ()
    return NodeFacts(
        files=FileFacts(
            loaded_module=loaded, firmware_dirs=dirs, kernel=KERNEL, cuda="12.2", nccl="2.18.3"
        ),
        dkms=DkmsFacts(entries=parse_status(dkms)),
        nvml=NvmlFacts(driver_version=loaded, gpus=gpus) if loaded else NvmlFacts(error="x"),
    )


def _next(facts: NodeFacts, version: str, **sent: bool) -> Call:
    state = as_state(NodeCommandAnswered(command_id="r", status="done", state=node_reading(facts)))
    return next_call(state, version, sent).call


def test_a_clean_node_is_ready_and_runs_its_version() -> None:
    facts = _facts((ISSUES / "dkms-status.nvidia-535.86.05").read_text(), OLD, (OLD,), OLD)
    read = node_reading(facts)
    assert (read.phase, read.driver, read.dkms, read.diag_passed) == ("ready", OLD, "built", True)
    assert _next(facts, OLD) is Call.VERIFIED
    assert _next(facts, NEW) is Call.INSTALL


def test_a_new_package_built_and_not_booted_is_rebooted_into() -> None:
    dkms = (ISSUES / "dkms-status.nvidia-535.86.05").read_text()
    dkms += f"nvidia/{NEW}, {KERNEL}, x86_64: installed\n"
    facts = _facts(dkms, OLD, (NEW,), OLD)
    assert node_reading(facts).phase == "dkms_built"
    assert _next(facts, NEW, install=True) is Call.REBOOT


def test_a_package_whose_build_failed_is_built_once_more_then_given_up() -> None:
    dkms = f"nvidia/{OLD}, {KERNEL}, x86_64: installed\nnvidia/{NEW}: added\n"
    facts = _facts(dkms, OLD, (NEW,), OLD)
    assert (node_reading(facts).phase, node_reading(facts).dkms) == ("dkms_failed", "added")
    assert _next(facts, NEW, install=True) is Call.REBUILD
    assert _next(facts, NEW, install=True, rebuild=True) is Call.FAILED


def test_a_module_loaded_without_its_firmware_directory_is_a_gsp_mismatch() -> None:
    # Seed 004: NEW loaded, only OLD's /lib/firmware/nvidia/ directory on disk.
    facts = _facts(f"nvidia/{NEW}, {KERNEL}, x86_64: installed\n", NEW, (OLD,), None)
    assert node_reading(facts).phase == "gsp_mismatch"
    assert _next(facts, NEW, install=True, reboot=True) is Call.FAILED


def test_a_node_whose_nvml_does_not_start_fails_the_diagnostic() -> None:
    facts = _facts(f"nvidia/{OLD}, {KERNEL}, x86_64: installed\n", OLD, (OLD,), OLD)
    broken = facts.model_copy(update={"nvml": NvmlFacts(error="Driver/library version mismatch")})
    assert node_reading(broken).diag_passed is False
    assert _next(broken, OLD) is not Call.VERIFIED


def test_a_failed_dcgm_diagnostic_fails_the_unit_even_with_nvml_answering() -> None:
    facts = _facts(f"nvidia/{OLD}, {KERNEL}, x86_64: installed\n", OLD, (OLD,), OLD)
    failed = Diagnostics(dcgm=DcgmDiag(passed=False, failed=("Hardware/GPU Memory",)))
    assert node_reading(facts.model_copy(update={"diagnostics": failed})).diag_passed is False
    passed = Diagnostics(dcgm=DcgmDiag(passed=True))
    assert node_reading(facts.model_copy(update={"diagnostics": passed})).diag_passed is True
