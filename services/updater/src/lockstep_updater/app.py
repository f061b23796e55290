"""Composition root of the updater service: the only place its dependencies are built."""

from __future__ import annotations

from lockstep_common.service import ServiceApp
from lockstep_updater.router import subscriptions
from lockstep_updater.settings import Settings

NAME = "updater"


def create_app(settings: Settings) -> ServiceApp:
    """Build the service; nothing connects until ``start()``."""
    return ServiceApp(NAME, settings, subscriptions=subscriptions())
