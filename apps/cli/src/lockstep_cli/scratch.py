"""Throwaway namespaces (a benchmark run, a test): removing one's streams and schemas."""

from __future__ import annotations

import asyncpg
import nats

from lockstep_common import db


async def drop_namespace(nats_url: str, database_url: str, namespace: str) -> None:
    """Delete the JetStream streams (``NAMESPACE_*``) and schemas (``namespace_*``) of
    ``namespace``; what is not there is skipped."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        for info in await js.streams_info():
            if info.config.name and info.config.name.startswith(f"{namespace.upper()}_"):
                await js.delete_stream(info.config.name)
    finally:
        await nc.close()
    conn = await asyncpg.connect(database_url)
    try:
        schemas = await conn.fetch(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", f"{namespace}_"
        )
        for row in schemas:
            await conn.execute(f"DROP SCHEMA {db.quote_ident(row['nspname'])} CASCADE")
    finally:
        await conn.close()
