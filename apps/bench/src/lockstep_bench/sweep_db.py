"""The database half of ``lockstep bench sweep``: each measured sweep is the service's own path.

With a database, a run's measured path is ``lockstep_inventory.sweeping.run_sweep`` (the sweep
lock, chunks committed while the sweep goes on, state, history and drift events written to the
outbox) over a registry of the simulated BMCs, so the timing ends when the last drift event is
committed. Each run gets a fresh schema, prepared outside the timing: the nodes registered and
pinned to the fleet's golden stack, except ``drifted_share`` of them pinned to a stack with
another BMC version, so the sweep finds real drift and emits one ``drift.detected`` per such
node. The schema is dropped after the run.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass

from lockstep_common import canonical, db
from lockstep_common.compatibility.files import packaged_rules
from lockstep_common.events.v1 import ScopeSelector
from lockstep_common.vocabulary import Component
from lockstep_inventory import admin
from lockstep_inventory.adapters import registry, state
from lockstep_inventory.adapters.sweeper import SweepOptions, SweepResult, sweep
from lockstep_inventory.domain.fleet_file import NodeEntry
from lockstep_inventory.domain.members import versions_of
from lockstep_inventory.domain.pins import Pin, scope_key, stack_of
from lockstep_inventory.settings import Settings
from lockstep_inventory.sweeping import run_sweep
from lockstep_redfish.credentials import CredentialSource
from lockstep_redfish.profile import profile_named
from lockstep_redfish.session import BmcTarget
from lockstep_sim.fleet import build_fleet

SITE = "bench"
PROFILE = "gb200"  # what the bench's simulator serves
SIM_BMC = profile_named("lockstep-sim")  # the BMC profile of its default dialect


@dataclass(frozen=True, slots=True)
class DbRun:
    """One run's schema and what it is expected to find."""

    database_url: str
    schema: str
    drifted: tuple[str, ...]


def _stack(bmc: str | None = None) -> dict[str, dict[Component, str]]:
    node = build_fleet(1, PROFILE)[0]
    # The simulator's own dialect: the lockstep-sim BMC profile's member rows.
    grouped = versions_of({m: c.version for m, c in node.components.items()}, SIM_BMC)
    golden = stack_of(grouped.versions, grouped.conflicts)
    if bmc is not None:
        golden[Component.BMC] = bmc
    return {PROFILE: golden}


def _pin(stack: dict[str, dict[Component, str]], scope: ScopeSelector, sequence: int) -> Pin:
    return Pin(SITE, scope, canonical.stack_hash(stack), stack, sequence, dt.datetime.now(dt.UTC))


async def prepare(database_url: str, targets: Sequence[BmcTarget], drifted_share: float) -> DbRun:
    """A fresh schema: migrated, the targets registered, golden and drift pins stored."""
    schema = f"bench_sweep_{uuid.uuid4().hex[:8]}"
    step = max(1, round(1 / drifted_share)) if drifted_share > 0 else 0
    drifted = tuple(t.node_id for t in targets[::step]) if step else ()
    settings = Settings(database_url=database_url, db_schema=schema)
    async with admin.migrated_connection(settings) as conn:
        nodes = [
            NodeEntry(
                id=t.node_id,
                bmc_url=t.url,
                profile=PROFILE,
                site=SITE,
                credentials="env:LOCKSTEP_BENCH_BMC",
                allow_plain_http=t.allow_plain_http,
            )
            for t in targets
        ]
        await registry.import_nodes(conn, nodes)
        pins = [_pin(_stack(), ScopeSelector(), 1)]
        if drifted:  # newer, so it wins on those nodes
            pins.append(_pin(_stack(bmc="GB200Nvl-00.00-0"), ScopeSelector(nodes=drifted), 2))
        for pin in pins:
            await state.save_pin(conn, pin, scope_key(pin.scope), uuid.uuid4())
    return DbRun(database_url, schema, drifted)


async def commit_sweep(
    run: DbRun, credentials: CredentialSource, options: SweepOptions, *, chunk: int
) -> tuple[int, int]:
    """The measured path: ``run_sweep`` over the registry; (results, drift events committed)."""
    pool = await db.create_pool(
        run.database_url, run.schema, min_size=2, max_size=4, application_name="lockstep-bench"
    )
    try:
        async with pool.acquire() as conn:
            nodes = list((await state.nodes(conn)).values())
        settings = Settings(database_url=run.database_url, db_schema=run.schema, sweep_chunk=chunk)

        def results(targets: Sequence[BmcTarget]) -> AsyncGenerator[SweepResult, None]:
            return sweep(targets, credentials=credentials, options=options)

        summary = await run_sweep(
            pool,
            nodes,
            settings,
            by="bench",
            source=admin.SOURCE,
            rules=packaged_rules(),
            results_of=results,
        )
        return summary.total - summary.unreadable, len(summary.outcome.detected)
    finally:
        await pool.close()


async def drop(run: DbRun) -> None:
    """Remove the run's schema."""
    conn = await db.connect_with_retry(run.database_url, attempts=3)
    try:
        await conn.execute(f"DROP SCHEMA {db.quote_ident(run.schema)} CASCADE")
    finally:
        await conn.close()
