"""The demo's rollout part: the mission, on the simulated fleet the drift story ran on.

What it shows, each step observed rather than assumed (issue 13, deliverable 1): a new bundle
(BMC, GPU VBIOS and NIC firmware, as PLDM packages the simulated devices accept, and a driver
package: driver, GSP firmware, fabric manager, CUDA and NCCL, one in-band unit) is built, signed
and attested; a routine intent is planned (the plan printed as ``lockstep rollout plan`` prints
it) and approved with an approver's Ed25519 key (as ``lockstep rollout approve`` signs); the
canary is flashed and gated, the wave follows to completion while one fabric domain is occupied
by a cluster (its nodes wait, drained only when the cluster ends) and one node drained by
someone else is left alone; every updated node took the driver package through its node agent
after its firmware, and its agent reports the new driver branch. Then a second bundle whose GPU
image degrades health: the canary trips the gate, the rollout halts, the canary's GPUs are
flipped back by a re-flash of the previous attested image (the updater's flip-back,
``docs/updater.md``), and the BMC and scheduler ledgers
show that no node outside the canary received a single mutating call. Last, one GSP / driver
mismatch (seed 004) is remediated by the updater's runbook: detected by the inventory from the
node agent's report, held for approval, approved, then drained, the pinned driver reinstalled as
one unit through the agent, rebooted, verified and given back.

The planner, updater and healthgate run as the system's own processes; their policies (short
soaks, a canary of 5 per stratum) and the scheduler's address are set up by :func:`prepare`
before the system starts.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rich.console import Console

from lockstep_attest.testing.bundles import DriverPackage, Kit, make_kit
from lockstep_cli.polling import until
from lockstep_cli.rollout_cli import print_plan, run_command, start_rollout
from lockstep_common import db, subjects
from lockstep_common.envelope import make_envelope, source_of
from lockstep_common.events.v1 import BundleSubmitted, PlanAsk, ScopeSelector
from lockstep_common.identities import CLI
from lockstep_common.natsconn import connect
from lockstep_common.pldm import ComponentSpec, FormatRevision, RecordSpec, build_package
from lockstep_common.subjects import Namespace
from lockstep_common.vocabulary import ChangeClass, Component, ObservationSource
from lockstep_inventory.adapters import state
from lockstep_inventory.queries import drift_report, fleet_status
from lockstep_planner.settings import Settings as PlannerSettings
from lockstep_sim.agents.commands import package_bytes
from lockstep_sim.faults import Fault, FaultPlan
from lockstep_sim.profiles import GB200
from lockstep_sim.scenarios import Drift, DriftKind
from lockstep_updater.adapters.repository import release_remedy

if TYPE_CHECKING:
    from lockstep_devstack import Stack
    from lockstep_sim.runtime import FleetRuntime

TIME_SCALE = 0.002  # real seconds per simulated BMC minute: a 15-minute GPU flash takes 30 ms
SOAK_S = 4  # each wave soaks this long: 16 health reports per node at the agents' cadence
APPROVER = "alice"
SCOPE = ScopeSelector(sites=("site-ams1",), profiles=("gb200",))
PUSH = "update-multipart"  # the BMC ledger's action for a POST to MultipartHttpPushUri
READS = {"session_create", "session_delete"}  # BMC ledger actions that change no device
NEW = {"bmc": "GB200Nvl-25.02-1", "gpu": "97.00.9A.00.01", "nic": "32.43.1000"}
BAD_GPU = "97.00.9B.00.07"
# The driver step: R580 LTSB -> R595 production, the CUDA 13.2 user space it brings (the
# simulator's catalog, standards.md section 7); GSP firmware and fabric manager ship inside it.
# Its bytes are what the simulated nodes' repository serves for it: the agents download the
# exact version and install it only when its SHA-256 is the one the attested bundle names.
DRIVER = DriverPackage("595.58.03", cuda="13.2", nccl="2.27.7", package=package_bytes("595.58.03"))
DRIVER_BRANCH = "R595"
IN_BAND = ("driver", "gpu_gsp", "fabric_manager", "cuda", "nccl")
GATE_MINIMUM = """
[minimum]
canary_nodes = 5
control_nodes = 5
samples_per_node = 3
"""


@dataclass(frozen=True)
class RolloutSetup:
    """What the services need before they start, and what the story needs afterwards."""

    base: Path
    approver_key: Path
    scheduler_port: int
    env: dict[str, str]
    screenshots: tuple[str, Path] | None = None  # the console's URL, where its pages go


def prepare(base: Path) -> RolloutSetup:
    """Policies, the approvers trust store and the scheduler's address, for the services."""
    policy = base / "policy"
    approvers = policy / "approvers"
    approvers.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    private = policy / f"{APPROVER}.key.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    private.chmod(0o600)
    (approvers / f"{APPROVER}.pem").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    port = _free_port()
    roots = json.dumps([str(base / "release")])
    env = {
        "LOCKSTEP_PLANNER_POLICY_FILE": str(_planner_policy(policy / "classes.yaml")),
        "LOCKSTEP_PLANNER_APPROVERS_DIR": str(approvers),
        "LOCKSTEP_PLANNER_WORKER_POLL_S": "0.1",
        "LOCKSTEP_PLANNER_DEFAULT_MAX_UNAVAILABLE": "24",
        "LOCKSTEP_PLANNER_WAVE_DEADLINE_MIN_S": "120",
        # The planner asks the same scheduler which jobs occupy which fabric domains.
        "LOCKSTEP_PLANNER_SCHEDULER_URL": f"http://127.0.0.1:{port}",
        "LOCKSTEP_PLANNER_FABRIC_SYNC_S": "2",
        "LOCKSTEP_HEALTHGATE_POLICY_FILE": str(_gate_policy(policy / "gate.toml")),
        "LOCKSTEP_HEALTHGATE_EVAL_POLL_S": "0.2",
        "LOCKSTEP_HEALTHGATE_EVAL_GRACE_S": "0.5",
        "LOCKSTEP_UPDATER_BUNDLE_ROOTS": roots,
        "LOCKSTEP_UPDATER_SCHEDULER_URL": f"http://127.0.0.1:{port}",
        "LOCKSTEP_UPDATER_WORKERS": "12",
        "LOCKSTEP_UPDATER_WORKER_POLL_S": "0.1",
        "LOCKSTEP_UPDATER_LEASE_S": "10",
        "LOCKSTEP_UPDATER_RETRY_S": "0.2",
        "LOCKSTEP_UPDATER_DRAIN_POLL_S": "0.2",
        "LOCKSTEP_UPDATER_REDFISH_POLL_S": "0.05",
        "LOCKSTEP_UPDATER_VERIFY_SETTLE_S": "2",
        # In-band commands go to each node's agent over NATS (agent.command.<site>.<node>,
        # which only the updater may publish). The GSP runbook waits for approval here: the
        # drift story's mismatch is fixed by hand before anyone approves.
        "LOCKSTEP_UPDATER_AGENT_CHANNEL": "nats",
        "LOCKSTEP_UPDATER_GSP_REMEDY": "approval",
    }
    return RolloutSetup(base, private, port, env)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _planner_policy(path: Path) -> Path:
    """The packaged change classes; routine keeps its one approval, with a canary of 5 per
    stratum (the healthgate's minimum), one wave after it, short soaks, and a failure budget
    of 5% (a node left alone ends failed, and must not halt the rollout)."""
    doc = yaml.safe_load(
        resources.files("lockstep_planner").joinpath("data/change_classes.yaml").read_bytes()
    )
    doc["classes"]["routine"].update(
        canary_min_per_stratum=5,
        wave_fractions=[1.0],
        canary_soak_s=SOAK_S,
        layer_soak_s=0,
        wave_soak_s=SOAK_S,
        failure_budget=0.05,
    )
    path.write_text(yaml.safe_dump(doc))
    return path


def _gate_policy(path: Path) -> Path:
    """The packaged gate policy with the minimums a demo fleet's strata can meet."""
    text = resources.files("lockstep_gate").joinpath("data/default_policy.toml").read_text()
    head, _, rest = text.partition("[minimum]")
    path.write_text(head + GATE_MINIMUM + "\n[hard_rules]" + rest.split("\n[hard_rules]", 1)[1])
    return path


def package_for(kind: str, version: str) -> bytes:
    """A PLDM (DSP0267) package with one record and one image per GB200 device of ``kind``
    (a tray has two kinds of NIC: every member the updater targets must take the image)."""
    classes = [c for c in GB200 if c.kind == kind]
    return build_package(
        revision=FormatRevision.V1_0,
        version=version,
        release_time=datetime.now(UTC),
        components=[
            ComponentSpec(image=b"\x5a" * 4096, identifier=c.pldm_component_id, version=version)
            for c in classes
        ],
        device_records=[
            RecordSpec(
                descriptors=list(c.descriptors()), applicable_components=[i], version=version
            )
            for i, c in enumerate(classes)
        ],
    )


class RolloutStory:
    """The rollout part, run against the running system and the drift story's fleet."""

    def __init__(
        self,
        console: Console,
        stack: Stack,
        rt: FleetRuntime,
        setup: RolloutSetup,
        kit: Kit,
        *,
        inventory: Any,
        sweep: Callable[[str], Awaitable[None]],
    ) -> None:
        self.console, self.stack, self.rt, self.setup, self.kit = console, stack, rt, setup, kit
        self.inventory, self.sweep = inventory, sweep
        cli = stack.nats_client(CLI)
        self.planner = PlannerSettings(
            nats_url=",".join(cli.servers),
            nats_user=cli.user,
            nats_password_file=cli.password_file,
            nats_ca_file=cli.ca_file,
            database_url=stack.database_env("planner")["LOCKSTEP_DATABASE_URL"],
            log_json=False,
        )
        self.ns = Namespace(self.planner.namespace)
        self.pools: dict[str, Any] = {}
        self.last_counts: dict[str, int] = {}
        self.shots: asyncio.Task[str] | None = None

    async def run(self) -> None:
        for name in ("planner", "updater", "healthgate"):
            url = self.stack.database_env(name)["LOCKSTEP_DATABASE_URL"]
            self.pools[name] = await db.create_pool(
                url, name, min_size=1, max_size=2, application_name="lockstep-demo"
            )
        try:
            await self._good_rollout()
            await self._bad_rollout()
            await self._gsp_runbook()
            if self.shots is not None:
                waited = time.monotonic()
                line = await self.shots
                waited = time.monotonic() - waited
                self.console.print(
                    f"{line} (the demo waited {waited:.1f}s for them)",
                    highlight=False,
                    soft_wrap=True,
                )
        finally:
            if self.shots is not None:
                self.shots.cancel()
            for pool in self.pools.values():
                await pool.close()

    # -- the good bundle -------------------------------------------------------------------

    async def _good_rollout(self) -> None:
        c = self.console
        c.rule("a new bundle: BMC, GPU VBIOS and NIC firmware, and a driver/CUDA/NCCL step")
        kit = make_kit(
            self.setup.base / "release",
            signer=self.kit.signer,
            name="bundle-2026.12.1",
            bundle_version="2026.12.1",
            bmc_image=(NEW["bmc"], package_for("bmc", NEW["bmc"])),
            gpu_image=(NEW["gpu"], package_for("gpu", NEW["gpu"])),
            nic_image=(NEW["nic"], package_for("nic", NEW["nic"])),
            driver=DRIVER,
            only=("bmc", "gpu_vbios", "nic", *IN_BAND),
        )
        stack_hash = await self._attest(kit)
        c.print(
            f"  its driver step: driver {DRIVER.version} (in band: driver, GSP firmware, fabric "
            f"manager, CUDA {DRIVER.cuda}, NCCL {DRIVER.nccl} from one package, installed "
            "through the node agents after the firmware; one_way: undone by reinstalling the "
            "previous package, no bank to flip back)"
        )
        plan = await self._plan(stack_hash, "CAB-2026-1207")
        rollout = plan["rollout_id"]
        waves = plan["plan"]["waves"]
        canary = set(waves[0]["nodes"])
        later = [n for w in waves[1:] for n in w["nodes"]]
        occupied_domain, occupied = self._domain_to_occupy(set(later))
        foreign = next(n for n in later if n not in occupied)
        # Meanwhile, on the fleet: a cluster starts on one fabric domain, and an operator
        # drains one node for a disk swap. Neither is Lockstep's to undo.
        job = self.rt.scheduler.occupy(occupied, duration_s=1e12, name="llm-pretrain-7")
        self.rt.scheduler.drain(foreign, "disk replacement INC-4411", "ops-oncall")
        c.print(
            f"  meanwhile: cluster job {job.job_id} occupies fabric domain {occupied_domain} "
            f"(its {len(occupied)} nodes of wave 1); ops-oncall drained {foreign} "
            "(disk replacement INC-4411)"
        )
        await self._approve(rollout)

        c.rule("the canary, flashed and gated")
        early = await self._before_release(rollout, later)
        passed = await self._wait("healthgate", f"gate.passed.{rollout}")
        flashed = [n for n in sorted(canary) if self._pushes(n)]
        resumed = {e.node_id for e in self.rt.scheduler.ledger if e.action == "resume"}
        back = [n for n in flashed if n in resumed and self.rt.scheduler.node(n).drain is None]
        c.print(
            f"  canary: {len(flashed)}/{len(canary)} nodes flashed "
            f"({self._versions(flashed[0])}), {len(back)} drained and given back"
        )
        c.print(f"  gate.passed wave 0: {_evidence(passed[0])}", highlight=False)
        c.print(f"  nodes of later waves flashed before the gate released them: {early}")

        c.rule("the wave: one fabric domain occupied, one node drained by someone else")
        others = [n for n in later if n not in occupied and n != foreign]
        await until(
            lambda: self._all_flashed(others), f"{len(others)} nodes of wave 1 flashed", 120
        )
        try:
            waiting = await until(
                lambda: self._all_in(rollout, occupied, "draining"), "draining", 60
            )
        except TimeoutError:
            raise TimeoutError(
                f"timed out waiting for the nodes of {occupied_domain} to wait in draining: "
                f"{self.last_counts}"
            ) from None
        c.print(
            f"  {len(others)} nodes of wave 1 flashed; the {len(occupied)} nodes of "
            f"{occupied_domain} wait while {job.job_id} runs (images staged, steps: "
            f"{_counts(waiting)}, drained: "
            f"{sum(self.rt.scheduler.node(n).state == 'drained' for n in occupied)}); "
            f"activated: {sum(self._updated(n) for n in occupied)}"
        )
        self.rt.scheduler.finish_job(job.job_id)
        c.print(f"  {job.job_id} ends: {occupied_domain} is free, and its nodes follow")
        (done,) = await self._wait("planner", f"rollout.completed.{rollout}", timeout_s=120)
        drain = self.rt.scheduler.node(foreign).drain
        (item,) = await self.pools["updater"].fetch(
            "SELECT state, reason FROM node_work WHERE rollout_id = $1 AND node_id = $2",
            rollout,
            foreign,
        )
        c.print(
            f"  {foreign}: {item['state']} ({item['reason'][:70]}...); its drain is still "
            f"{drain.by if drain else 'gone'}'s"
        )
        c.print(
            f"  [bold green]rollout.completed[/] {rollout}: {done['nodes_updated']} nodes "
            f"updated, {done['nodes_failed']} failed; {occupied[0]} now runs "
            f"{self._versions(occupied[0])}"
        )
        await self._driver_step(rollout, foreign)
        await self._conformance(done["rollout_id"])

    # -- the bad bundle --------------------------------------------------------------------

    async def _bad_rollout(self) -> None:
        c = self.console
        c.rule("a second bundle, whose GPU image degrades health")
        kit = make_kit(
            self.setup.base / "release",
            signer=self.kit.signer,
            name="bundle-2026.12.2",
            bundle_version="2026.12.2",
            gpu_image=(BAD_GPU, package_for("gpu", BAD_GPU)),
            only=("gpu_vbios",),
        )
        # The image degrades the GPUs of whichever node activates it: XID 48 and 79 in the
        # node agents' health reports, NCCL bus bandwidth under the 92% rule.
        self.rt.simulator.set_faults(
            FaultPlan(faults=(Fault("degrade_health", components=("gpu",)),))
        )
        bmc_before = {n.id: len(self.rt.simulator.bmc(n.id).ledger) for n in self.rt.fleet}
        scheduler_before = len(self.rt.scheduler.ledger)
        stack_hash = await self._attest(kit)
        plan = await self._plan(stack_hash, "CAB-2026-1219", show=False)
        rollout = plan["rollout_id"]
        canary = set(plan["plan"]["waves"][0]["nodes"])
        await self._approve(rollout)
        (tripped,) = await self._wait("healthgate", f"gate.tripped.{rollout}", timeout_s=90)
        c.print(
            f"  [bold red]gate.tripped[/] wave 0: offending nodes "
            f"{', '.join(tripped['offending_nodes'][:5])}; {_evidence(tripped)}",
            highlight=False,
        )
        (halted,) = await self._wait("planner", f"rollout.halted.{rollout}")
        c.print(f"  rollout.halted by {halted['halted_by']}: {halted['reason'][:100]}")
        await self._wait("updater", f"wave.completed.{rollout}")
        items = await until(lambda: self._flipped_back(rollout), "the flip-backs to end", 60)
        flipped = sorted(n for n, state in items.items() if state == "done")
        rolled = await self._wait(
            "updater", f"device.rolled_back.{rollout}.", len(flipped), prefix=True
        )
        back = [n for n in flipped if self._updated(n)]
        c.print(
            f"  A/B flip-back: {len(flipped)} canary nodes activated the image and were flipped "
            f"back to their previous image ({len(rolled)} device.rolled_back); read back on GPU "
            f"VBIOS {NEW['gpu']}: {len(back)}/{len(flipped)}; the other "
            f"{len(items) - len(flipped)} activated nothing: no call"
        )
        touched = sorted(
            n.id
            for n in self.rt.fleet
            if n.id not in canary
            and any(
                e["action"] not in READS
                for e in self.rt.simulator.bmc(n.id).ledger[bmc_before[n.id] :]
            )
        )
        drained = sorted({e.node_id for e in self.rt.scheduler.ledger[scheduler_before:]} - canary)
        c.print(
            f"  ledger check: BMCs outside the canary ({len(self.rt.fleet) - len(canary)} "
            f"nodes) that received a mutating call: {len(touched)}; scheduler changes "
            f"outside the canary: {len(drained)}"
        )
        if self.setup.screenshots is not None:
            # Taken while the runbook runs (the browser mostly waits on its own start-up), so
            # that they cost the demo next to nothing; said once they are written.
            self.shots = asyncio.create_task(self._screenshots(rollout, *self.setup.screenshots))
        self.rt.simulator.set_faults(None)

    async def _screenshots(self, rollout: str, url: str, out: Path) -> str:
        """The console's pages of the halted rollout and of the fleet, as the README shows."""
        from lockstep_console.screenshots import take

        started = time.monotonic()
        shots = await asyncio.to_thread(take, url, rollout, out)
        return (
            f"console screenshots of {rollout} (rollout, gate) and the fleet, taken in "
            f"{time.monotonic() - started:.1f}s: " + ", ".join(str(p) for p in shots)
        )

    # -- the GSP runbook -------------------------------------------------------------------

    async def _gsp_runbook(self) -> None:
        c = self.console
        c.rule("a GSP / driver mismatch, remediated by the runbook (seed 004)")
        # A node the good rollout updated: pinned to its stack, whose driver package the
        # runbook reinstalls from the bundle that attested it (the agents install no other).
        node = next(
            n.id
            for n in reversed(self.rt.fleet)
            if n.profile == "gb200"
            and n.site in SCOPE.sites
            and self.rt.scheduler.node(n.id).drain is None
            and self.rt.software[n.id].state.driver.version == DRIVER.version
        )
        before = len(self.rt.agent_ledger)  # the rollout's driver step is in it already
        (drift,) = self.rt.drifts.apply([Drift(DriftKind.GSP_MISMATCH, node)])
        c.print(
            f"  {node}: an interrupted upgrade to {drift.driver} left no "
            f"/lib/firmware/nvidia/{drift.driver}/; the module loads, RmInitAdapter fails"
        )
        remedy = await until(lambda: self._held_remedy(node), "the runbook, held for approval", 60)
        c.print(
            f"  drift.detected gsp_mismatch -> runbook {remedy} recorded, waiting for approval "
            "(LOCKSTEP_UPDATER_GSP_REMEDY=approval)"
        )
        async with self.pools["updater"].acquire() as conn:
            await release_remedy(conn, node)
        c.print(f"  lockstep node approve-remedy {node}")
        (verified,) = await self._wait("updater", f"device.verified.{remedy}.{node}")
        await until(lambda: self._remedy_ended(remedy), "the node given back", 60)
        steps = [
            e["step"]
            for e in self.rt.agent_ledger[before:]
            if e["node"] == node and e["outcome"] != "refused"
        ]
        s = self.rt.software[node].state
        c.print(
            f"  {node}: drained, driver {verified['to_version']} reinstalled as one unit "
            f"(agent ledger: {', '.join(steps)}); module {s.loaded_module}, GSP firmware "
            f"{s.gsp_firmware}, dcgmi diag -r 1 "
            f"{'passes' if self.rt.software[node].diag_passes() else 'fails'}; given back: "
            f"{self.rt.scheduler.node(node).drain is None}"
        )

    async def _held_remedy(self, node: str) -> str | None:
        value: str | None = await self.pools["updater"].fetchval(
            "SELECT rollout_id FROM node_work WHERE node_id = $1 AND kind = 'remedy'"
            " AND state = 'pending' AND lease_until = 'infinity'",
            node,
        )
        return value

    async def _remedy_ended(self, remedy: str) -> str | None:
        state: str | None = await self.pools["updater"].fetchval(
            "SELECT state FROM node_work WHERE rollout_id = $1 AND state = 'done'", remedy
        )
        return state

    async def _driver_step(self, rollout: str, foreign: str) -> None:
        """The in-band step, as the agents saw it: one driver package per updated node, after
        its firmware, and the new branch in the agents' reports to the inventory."""
        rows = await self.pools["updater"].fetch(
            "SELECT node_id FROM node_work WHERE rollout_id = $1 AND kind = 'update'"
            " AND state = 'done'",
            rollout,
        )
        updated = sorted(r["node_id"] for r in rows)
        steps: dict[str, list[str]] = {}
        for e in self.rt.agent_ledger:
            if e["outcome"] != "refused":
                steps.setdefault(e["node"], []).append(e["step"])
        once = sum(steps.get(n) == ["install-driver", "reboot"] for n in updated)

        async def reported() -> int | None:
            async with self.inventory.acquire() as conn:
                seen = await state.observations(conn, updated)
            agents = [seen.get(n, {}).get(ObservationSource.AGENT) for n in updated]
            count = sum(
                o is not None
                and o.components.get(Component.DRIVER) == DRIVER.version
                and o.members.get("driver_branch") == DRIVER_BRANCH
                for o in agents
            )
            return count if count == len(updated) else None

        count = await until(reported, f"the agents reporting driver {DRIVER.version}", 60)
        s = self.rt.software[updated[0]].state
        c = self.console
        c.print(
            f"  driver step: {once}/{len(updated)} updated nodes took the driver package once "
            f"through their node agent, after their firmware (agent ledger: install-driver, "
            f"reboot); {updated[0]}: module {s.loaded_module}, GSP firmware {s.gsp_firmware}, "
            f"CUDA {s.cuda}, NCCL {s.nccl}"
        )
        c.print(
            f"  agents report driver {DRIVER.version} ({DRIVER_BRANCH}, was R580) on "
            f"{count}/{len(updated)} updated nodes; {foreign} (left alone) still runs "
            f"{self.rt.software[foreign].state.driver.version}"
        )

    async def _conformance(self, rollout: str) -> None:
        """The inventory applies the rollout's pin; a sweep reads the fleet against it."""
        sites = set(SCOPE.sites)
        pins = await self._wait("planner", "pin.changed.", len(sites), prefix=True, rollout=rollout)
        pin = pins[0]

        async def applied() -> bool:
            async with self.inventory.acquire() as conn:
                return any(p.stack_hash == pin["stack_hash"] for p in await state.pins(conn))

        await until(applied, "the inventory to apply the rollout's pin", 30)
        await self.sweep("sweep 4: the fleet against the rollout's pin")
        async with self.inventory.acquire() as conn:
            status = await fleet_status(conn)
            drifted = [e.node_id for e in await drift_report(conn)]
        self.console.print(
            f"  fleet conformance {status.total.conforming}/{status.total.nodes}; "
            f"drifted: {', '.join(drifted) or 'none'}"
        )

    # -- steps -----------------------------------------------------------------------------

    async def _attest(self, kit: Kit) -> str:
        c = self.console
        manifest = json.loads((kit.bundle / "manifest.json").read_text())
        parts = ", ".join(f"{k} {v['version']}" for k, v in manifest["profiles"]["gb200"].items())
        c.print(f"  built and signed {kit.bundle.name}: {parts}")
        await self._send(
            subjects.bundle_submitted(),
            BundleSubmitted(bundle_uri=kit.bundle.as_uri(), submitted_by="release-ci"),
        )
        version = manifest["bundle_version"]

        async def known() -> str | None:
            row = await self.pools["planner"].fetchrow(
                "SELECT stack_hash FROM bundles WHERE bundle_version = $1", version
            )
            if row is None:
                return None
            seen = await self.pools["updater"].fetchval(
                "SELECT count(*) FROM bundles WHERE stack_hash = $1", row["stack_hash"]
            )
            return str(row["stack_hash"]) if seen else None

        stack_hash = await until(known, f"bundle {version} attested", 60)
        c.print(
            f"  bundle.attested {manifest['bundle_id']} {version}: stack hash "
            f"{stack_hash[:16]}..., known to the planner and the updater"
        )
        return stack_hash

    async def _plan(self, stack_hash: str, ticket: str, *, show: bool = True) -> dict[str, Any]:
        asked = PlanAsk(stack_hash=stack_hash, scope=SCOPE, change_class=ChangeClass.ROUTINE)
        self.console.rule(f"a routine intent ({ticket}): every gb200 node of site-ams1, planned")
        # Asked of the planner over the bus (rollout.start), as `lockstep rollout start`.
        decided = await asyncio.to_thread(
            start_rollout, self.planner, asked, approval=ticket, by="alice", wait_s=60
        )
        if decided["state"] != "planned":
            raise RuntimeError(f"the planner did not plan the intent: {decided['reasons']}")
        summary = decided.pop("summary")
        if show:
            print_plan(
                summary, f"state {decided['rollout_state']}", self.console, decided["rollout_id"]
            )
        else:
            waves = decided["plan"]["waves"]
            self.console.print(
                f"  rollout {decided['rollout_id']}: canary of {len(waves[0]['nodes'])}, "
                f"then {sum(len(w['nodes']) for w in waves[1:])} nodes"
            )
        return decided

    async def _approve(self, rollout: str) -> None:
        # Asked of the planner over the bus (rollout.control), as `lockstep rollout approve`.
        outcome = await asyncio.to_thread(
            run_command,
            self.planner,
            rollout,
            "approve",
            APPROVER,
            "",
            30.0,
            self.setup.approver_key,
        )
        if not outcome.startswith("done"):
            raise RuntimeError(f"approval of {rollout}: {outcome}")
        self.console.print(
            f"  approved by {APPROVER} (Ed25519 over the plan hash, key in the approvers trust "
            f"store): {outcome}"
        )

    async def _send(self, subject: str, data: Any) -> None:
        """Publish as the ``cli`` identity, the way ``lockstep`` commands do."""
        env = make_envelope(data, source=source_of("cli"))
        nc = await connect(self.stack.nats_client(CLI), name="lockstep-demo")
        try:
            await nc.jetstream().publish(
                self.ns.wire(subject), env.to_json(), headers={"Nats-Msg-Id": str(env.event_id)}
            )
        finally:
            await nc.close()

    async def _wait(
        self,
        service: str,
        subject: str,
        count: int = 1,
        timeout_s: float = 60,
        *,
        prefix: bool = False,
        rollout: str | None = None,
    ) -> list[dict[str, Any]]:
        """The data of the events ``service`` committed on ``subject`` (its outbox; with
        ``prefix``, on subjects starting with it, of ``rollout`` when given)."""

        async def enough() -> list[dict[str, Any]] | None:
            rows = await self.pools[service].fetch(
                "SELECT payload FROM outbox WHERE subject LIKE $1 ORDER BY id",
                subject + ("%" if prefix else ""),
            )
            found = [json.loads(r["payload"])["data"] for r in rows]
            found = [d for d in found if rollout is None or d.get("rollout_id") == rollout]
            return found if len(found) >= count else None

        return await until(enough, f"{subject} from {service}", timeout_s, poll_s=0.1)

    def _domain_to_occupy(self, later: set[str]) -> tuple[str, list[str]]:
        """A fabric domain for the cluster: one whose nodes in scope are all in the later
        wave if there is one (the smallest), else the one with the fewest canary nodes; the
        cluster occupies its nodes of the later wave."""
        domains: dict[str, set[str]] = {}
        for node in self.rt.fleet:
            if node.profile in SCOPE.profiles and node.site in SCOPE.sites:
                domains.setdefault(node.fabric_domain, set()).add(node.id)
        name, nodes = min(domains.items(), key=lambda d: (len(d[1] - later), len(d[1]), d[0]))
        return name, sorted(nodes & later)

    def _pushes(self, node: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.rt.simulator.bmc(node).ledger
            if e["action"] == PUSH and e.get("status") == 202
        ]

    async def _all_flashed(self, nodes: list[str]) -> bool:
        return all(self._updated(n) and self.rt.scheduler.node(n).drain is None for n in nodes)

    def _updated(self, node: str) -> bool:
        comps = self.rt.simulator.bmc(node).node.components.values()
        return {c.version for c in comps if c.cls.kind == "gpu"} == {NEW["gpu"]}

    def _versions(self, node: str) -> str:
        comps = self.rt.simulator.bmc(node).node.components
        seen = {c.cls.kind: c.version for c in comps.values() if c.cls.kind in NEW}
        return ", ".join(f"{k} {seen[k]}" for k in ("bmc", "nic", "gpu") if k in seen)

    async def _before_release(self, rollout: str, later: list[str]) -> int:
        """How many nodes of the later waves received a push before the planner released
        wave 1 (after the canary's gate passed). Pushes are read before the release is, so a
        push counted here certainly came before it."""
        deadline = time.monotonic() + 90
        early = 0
        while time.monotonic() < deadline:
            pushed = sum(1 for n in later if self._pushes(n))
            released = await self.pools["planner"].fetchval(
                "SELECT count(*) FROM outbox WHERE subject = $1", f"wave.planned.{rollout}"
            )
            if released >= 2:
                return early
            early = max(early, pushed)
            await asyncio.sleep(0.1)
        raise TimeoutError(f"timed out waiting for {rollout}'s canary gate to release wave 1")

    async def _flipped_back(self, rollout: str) -> dict[str, str] | None:
        """The rollout's flip-back items by node, once every one has ended."""
        rows = await self.pools["updater"].fetch(
            "SELECT node_id, state FROM node_work WHERE rollout_id = $1 AND kind = 'rollback'",
            rollout,
        )
        states = {r["node_id"]: r["state"] for r in rows}
        ended = {"done", "cancelled", "failed", "quarantined"}
        return states if states and set(states.values()) <= ended else None

    async def _all_in(self, rollout: str, nodes: list[str], step: str) -> dict[str, int] | None:
        """The nodes' work items by step, once every one is in ``step``."""
        rows = await self.pools["updater"].fetch(
            "SELECT node_id, state FROM node_work WHERE rollout_id = $1", rollout
        )
        counts: dict[str, int] = {}
        for r in rows:
            if r["node_id"] in nodes:
                counts[r["state"]] = counts.get(r["state"], 0) + 1
        self.last_counts = counts
        return counts if counts.get(step) == len(nodes) else None


def _evidence(gate: dict[str, Any]) -> str:
    """The gate's evidence, one word per metric."""
    return ", ".join(
        f"{e['metric']} {'ok' if e['passed'] else 'FAILED'}" for e in gate["evidence"][:8]
    )


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none yet"
