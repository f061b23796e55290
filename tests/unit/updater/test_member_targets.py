"""Which members of a component a PLDM package is pushed to (domain.targets.applicable_members):
those whose device the package's firmware device records match on the PCI ids Redfish shows."""

from __future__ import annotations

import pytest

from lockstep_updater.domain.targets import applicable_members
from tests.integration.sim.pldm_fixtures import GB200_GPU, package_for

pytestmark = pytest.mark.unit
NVIDIA, MELLANOX = 0x10DE, 0x15B3
CX7, CONNECTX = (MELLANOX, 0x1021), (MELLANOX, 0x1023)
CX7_PACKAGE = package_for(GB200_GPU, "1.0", pci_device=0x1021)  # vendor is the GPU's: NVIDIA


def test_members_whose_device_the_package_names_are_kept() -> None:
    image = package_for(GB200_GPU, "1.0")
    gpu = (NVIDIA, GB200_GPU.pci_device)
    devices = {"/m/GPU_1": [gpu], "/m/GPU_0": [gpu], "/m/NIC_0": [CONNECTX]}
    assert applicable_members(image, devices) == ("/m/GPU_0", "/m/GPU_1")


def test_a_device_id_alone_is_not_enough_the_vendor_must_match_too() -> None:
    assert applicable_members(CX7_PACKAGE, {"/m/CX7_0": [CX7]}) == ()
    assert applicable_members(CX7_PACKAGE, {"/m/X": [(NVIDIA, 0x1021)]}) == ("/m/X",)


def test_any_function_of_a_device_may_match() -> None:
    image = package_for(GB200_GPU, "1.0")
    devices = {"/m/A": [CONNECTX, (NVIDIA, GB200_GPU.pci_device)], "/m/B": [CONNECTX]}
    assert applicable_members(image, devices) == ("/m/A",)


def test_members_of_unknown_devices_are_left_to_the_bmc() -> None:
    image = package_for(GB200_GPU, "1.0")
    assert applicable_members(image, {"/m/NIC_0": None, "/m/NIC_1": [CONNECTX]}) == ("/m/NIC_0",)


def test_an_image_that_is_not_a_pldm_package_declares_no_devices_so_all_are_kept() -> None:
    assert applicable_members(b"vendor blob", {"/m/B": [CX7], "/m/A": None}) == ("/m/A", "/m/B")
