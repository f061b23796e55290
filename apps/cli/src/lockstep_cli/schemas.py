"""Every service's role, schema and migrations on the embedded PostgreSQL, set up by the admin
before ``lockstep up`` starts any service.

The admin (``lockstep_admin``) creates each service's role and schema and applies the
service's migrations as the schema's owner (``db.migrate`` switches to it), so the tables are
the service's own and no other service can reach them. A service started afterwards finds its
schema current (its own ``migrate`` at start applies nothing and checks the recorded
checksums). It is done for every service, also those not started (``lockstep up -s``): an
operator's command run as the admin then never creates a service's schema as its own.

With an external PostgreSQL (``LOCKSTEP_DATABASE_URL``) nothing is done here: its roles are
the operator's, and each service migrates its schema at start as before.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Sequence

from lockstep_common import db
from lockstep_devstack import Stack


def service_migrations(name: str) -> list[db.Migration]:
    """What ``ServiceApp.start`` applies for service ``name``: the messaging tables, then the
    files of ``lockstep_<name>.migrations`` when the service has that package (every service's
    ``app.py`` passes exactly that package, or none; a unit test holds them to it)."""
    migrations = db.messaging_migrations()
    package = f"lockstep_{name}.migrations"
    if importlib.util.find_spec(package) is not None:
        migrations += db.load_migrations(name, package)
    return migrations


async def _migrate(admin_dsn: str, names: Sequence[str]) -> dict[str, list[str]]:
    conn = await db.connect_with_retry(admin_dsn, attempts=3)
    try:
        return {name: await db.migrate(conn, name, service_migrations(name)) for name in names}
    finally:
        await conn.close()


def prepare_schemas(stack: Stack, names: Sequence[str], report: Callable[[str], None]) -> None:
    """On the stack's embedded PostgreSQL, create the role and schema of each of ``names`` and
    apply its migrations as the admin; report what was applied."""
    if stack.postgres is None:
        return
    for name in names:
        stack.database_env(name)
    _, admin_dsn = stack.urls()
    for name, applied in asyncio.run(_migrate(admin_dsn, names)).items():
        if applied:
            report(f"applied migrations to schema {name}: {', '.join(applied)}")
