"""Composition root of the inventory service: the only place its dependencies are built."""

from __future__ import annotations

from lockstep_common.service import ServiceApp
from lockstep_inventory.router import subscriptions
from lockstep_inventory.settings import Settings

NAME = "inventory"


def create_app(settings: Settings | None = None) -> ServiceApp:
    """Build the service; nothing connects until ``start()``."""
    return ServiceApp(
        NAME,
        settings or Settings(),
        subscriptions=subscriptions(),
        migration_package="lockstep_inventory.migrations",
    )
