"""Redfish dialects the simulator speaks (``--dialect``): what a real BMC family's service root
and UpdateService say, and which update operations it takes, as data.

Each dialect restates the captured resources its BMC profile (``lockstep_redfish/profiles``)
was built from: ``nvidia-gb200-nvl`` the GB200 NVL capture (``Vendor``/``Product``, a multipart
push taking ``Immediate`` only, ``Oem.Nvidia.MultipartHttpPushUriOptions``, the OEM
``#NvidiaUpdateService.CommitImage`` action that copies the running image to the other bank, no
``SimpleUpdate``, no ``Activate``); ``nvidia-hgx`` the HGX H100 capture on AMI (its HMC manager
``HGX_BMC_0``, ``SimpleUpdate`` and multipart, ``CommitImage``); ``supermicro-x13`` the Supermicro
capture (``Oem.Supermicro`` root, ``#SmcUpdateService.Install``, no apply-time support
advertised); ``dmtf-generic`` the standard alone. ``lockstep`` is the simulator's own shape
(Stage/Activate, ``ForceUpdate``), the default; like every other dialect it offers no action of
its own to run the other bank again: a flip-back re-flashes the previous image (the
``lockstep-sim`` profile's ``reflash``).

Each also activates as its profile's ``[activation]`` says (``activation_reset``): a banked image
pushed ``Immediate`` is written and runs only after that reset (GB200: the tray's
``Chassis.Reset`` ``PowerCycle``, then background copy fills the other bank; HGX: the host's
``ComputerSystem.Reset``; Supermicro: ``Manager.Reset`` of ``Managers/1``), and Supermicro's
members carry the capture's ids with ``Backup_*`` members showing the other bank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lockstep_sim.fleet import FirmwareComponent, Node

UPDATE = "/redfish/v1/UpdateService"
COMMIT_IMAGE = f"{UPDATE}/Actions/Oem/NvidiaUpdateService.CommitImage"
SMC_INSTALL = f"{UPDATE}/Actions/Oem/SmcUpdateService.Install"
MANAGERS = "/redfish/v1/Managers"
# The Supermicro capture's member ids (tests/data/reference/redfish-mockups/supermicro_hgx
# FirmwareInventory) for the simulator's host-side members of either hardware profile; the
# HMC's HGX_FW_* members keep their names there.
SMC_MEMBER_IDS = {
    "FW_BMC_0": "BMC",
    "HostBMC_0": "BMC",
    "UEFI": "BIOS",
    "HostBIOS_0": "BIOS",
    "FW_CPLD_0": "CPLD_Motherboard",
    "CPLDMB_0": "CPLD_Motherboard",
    "CPLDMID_0": "CPLD_Backplane_1",
    **{f"PSU_{i}": f"PowerSupply{i + 1}" for i in range(8)},
    **{f"NIC_{i}": f"NIC{i + 3}" for i in range(2)},
}


@dataclass(frozen=True, slots=True)
class Dialect:
    """What one BMC family says and takes (module docstring)."""

    name: str
    root: dict[str, Any] = field(default_factory=dict)  # merged into ServiceRoot
    apply_times: tuple[str, ...] = ("Immediate", "OnReset")  # multipart and SimpleUpdate
    advertise_apply_times: bool = True  # @Redfish.OperationApplyTimeSupport shown
    simple_update: bool = True
    activate: bool = True  # UpdateService.Activate (v1_16_0) and Stage
    commit_image: bool = False  # #NvidiaUpdateService.CommitImage
    update_oem: dict[str, Any] = field(default_factory=dict)  # UpdateService.Oem
    oem_actions: dict[str, str] = field(default_factory=dict)  # Actions.Oem name -> target
    extra_managers: tuple[str, ...] = ()  # Manager ids beside BMC_0
    # How an ``Immediate`` push of a banked image becomes the running one: "" in its own task
    # (the simulator's shape); else only at this reset ("chassis", "system", "manager"), the
    # written image waiting in the other bank (Staged) until then, as the profile's
    # [activation] says the real BMC does.
    activation_reset: str = ""
    extra_chassis: tuple[str, ...] = ()  # Chassis ids beside Chassis_0 taking Chassis.Reset
    chassis_reset_types: tuple[str, ...] = ()  # their ResetType@Redfish.AllowableValues
    # The BMC's own Manager.Reset ResetType@Redfish.AllowableValues; any other is refused 400.
    manager_reset_types: tuple[str, ...] = ("GracefulRestart", "ForceRestart")
    # GB200 NVL "background copy" (nvfwupd guide, v2.0.6): once a new image runs, the BMC
    # copies it to the other bank, so both banks hold it.
    background_copy: bool = False
    # The push is answered only once the write is done, 204 with no Task (DSP0266: a
    # synchronous 2xx means the operation completed; the dmtf-generic profile's taskless "done").
    taskless: bool = False
    # ComputerSystem.Reset answered 202 with a Task "Computer Reset" that ends Completed with
    # TaskEvent.1.0.TaskCompletedOK, as the HGX capture's TaskService/Tasks/1..9 show.
    reset_task: bool = False
    push_uri: str = f"{UPDATE}/update-multipart"  # MultipartHttpPushUri
    manager_id: str = "BMC_0"  # the BMC's own Manager (Supermicro: 1)
    # Member ids as the real BMC names them: the simulator's id -> the captured one.
    member_ids: dict[str, str] = field(default_factory=dict)
    # RelatedItem a member points at, which UpdateParameters.Targets may also name (Supermicro's
    # update script targets /redfish/v1/Managers/1, the BMC member's RelatedItem).
    related: dict[str, str] = field(default_factory=dict)
    # Members that show another member's inactive bank (Supermicro Backup_BMC, Backup_BIOS):
    # member id -> (its backup member id, Name); Version "Not Present" while the bank is empty.
    backups: dict[str, tuple[str, str]] = field(default_factory=dict)
    # The role of the account Lockstep flashes with (lockstep_sim.accounts): what the profile's
    # calls need (DSP8011), no more; Manager.Reset needs ConfigureManager, which Operator lacks.
    operator_role: str = "Operator"


DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        # Oem.LockstepSim: what the lockstep-sim BMC profile recognises (no real BMC says it).
        Dialect("lockstep", root={"Oem": {"LockstepSim": {}}}),
        Dialect("dmtf-generic", taskless=True),
        Dialect(
            "nvidia-gb200-nvl",
            root={"Vendor": "NVIDIA", "Product": "GB200 NVL"},
            apply_times=("Immediate",),
            simple_update=False,
            activate=False,
            commit_image=True,
            activation_reset="chassis",  # nvfwupd RF_PWR_CYCLE: power cycle of the tray
            extra_chassis=("BMC_0",),
            chassis_reset_types=("PowerCycle",),
            background_copy=True,
            update_oem={
                "Nvidia": {
                    "@odata.type": "#NvidiaUpdateService.v1_2_0.NvidiaUpdateService",
                    "MultipartHttpPushUriOptions": {"UpdateOptionSupport": ["StageAndActivate"]},
                }
            },
            oem_actions={"#NvidiaUpdateService.CommitImage": COMMIT_IMAGE},
        ),
        Dialect(
            "nvidia-hgx",
            root={"Vendor": "AMI", "Product": "AMI Redfish Server"},
            apply_times=("Immediate",),
            activate=False,
            commit_image=True,
            oem_actions={"#NvidiaUpdateService.CommitImage": COMMIT_IMAGE},
            extra_managers=("HGX_BMC_0",),
            activation_reset="system",  # the profile: ComputerSystem.Reset ForceRestart
            reset_task=True,
        ),
        Dialect(
            "supermicro-x13",
            root={"Oem": {"Supermicro": {}}},
            apply_times=("Immediate",),
            advertise_apply_times=False,
            activate=False,
            oem_actions={"#SmcUpdateService.Install": SMC_INSTALL},
            activation_reset="manager",  # DSP0268 Manager.Reset of Managers/1 runs the new BMC
            operator_role="FirmwareOperator",  # Manager.Reset and its PATCH: ConfigureManager
            push_uri=f"{UPDATE}/upload",  # the capture's MultipartHttpPushUri
            manager_id="1",
            # The capture's Managers/1 (supermicro_hgx) allows GracefulRestart only.
            manager_reset_types=("GracefulRestart",),
            member_ids=SMC_MEMBER_IDS,
            related={"BMC": f"{MANAGERS}/1"},
            backups={"BMC": ("Backup_BMC", "BMC Backup"), "BIOS": ("Backup_BIOS", "BIOS Backup")},
        ),
    )
}
DEFAULT = "lockstep"


def dialect_named(name: str) -> Dialect:
    """The dialect ``name``; ValueError naming the known ones."""
    if name not in DIALECTS:
        raise ValueError(f"unknown dialect {name!r} (known: {', '.join(DIALECTS)})")
    return DIALECTS[name]


def shape_update_service(doc: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    """The simulator's UpdateService document as ``dialect`` says it."""
    out = {**doc, "Actions": dict(doc.get("Actions", {}))}
    if "MultipartHttpPushUri" in out:
        out["MultipartHttpPushUri"] = dialect.push_uri
    support = {"SupportedValues": list(dialect.apply_times)}
    for key in ("MultipartHttpPushUri@Redfish.OperationApplyTimeSupport",):
        if key in out:
            out[key] = support
    actions = out["Actions"]
    simple = actions.get("#UpdateService.SimpleUpdate")
    if isinstance(simple, dict):
        actions["#UpdateService.SimpleUpdate"] = {
            **simple,
            "@Redfish.OperationApplyTimeSupport": support,
        }
    if not dialect.advertise_apply_times:
        out.pop("MultipartHttpPushUri@Redfish.OperationApplyTimeSupport", None)
        if isinstance(simple, dict):
            actions["#UpdateService.SimpleUpdate"].pop("@Redfish.OperationApplyTimeSupport")
    if not dialect.simple_update:
        actions.pop("#UpdateService.SimpleUpdate", None)
    if not dialect.activate:
        actions.pop("#UpdateService.Activate", None)
    if dialect.oem_actions:
        actions["Oem"] = {name: {"target": target} for name, target in dialect.oem_actions.items()}
    if dialect.update_oem:
        out["Oem"] = dialect.update_oem
    return out


def rename_members(node: Node, dialect: Dialect) -> None:
    """The node's FirmwareInventory members under the ids ``dialect``'s BMC gives them."""
    renamed: dict[str, FirmwareComponent] = {}
    for member_id, component in node.components.items():
        component.id = dialect.member_ids.get(member_id, member_id)
        renamed[component.id] = component
    node.components = renamed


def target_member(uri: str, dialect: Dialect) -> str:
    """An UpdateParameters target as a FirmwareInventory URI: a RelatedItem the dialect's BMC
    takes as a target (Supermicro's Managers/1) names the member it relates to."""
    for member_id, related in dialect.related.items():
        if uri.rstrip("/") == related:
            return f"{UPDATE}/FirmwareInventory/{member_id}"
    return uri
