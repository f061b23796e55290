"""Composition root of the healthgate service: the only place its dependencies are built."""

from __future__ import annotations

from lockstep_common.service import ServiceApp
from lockstep_healthgate.router import subscriptions
from lockstep_healthgate.settings import Settings

NAME = "healthgate"


def create_app(settings: Settings) -> ServiceApp:
    """Build the service; nothing connects until ``start()``."""
    return ServiceApp(NAME, settings, subscriptions=subscriptions())
