"""Composition root of the planner service: the only place its dependencies are built."""

from __future__ import annotations

from lockstep_common.service import ServiceApp
from lockstep_planner.router import subscriptions
from lockstep_planner.settings import Settings

NAME = "planner"


def create_app(settings: Settings) -> ServiceApp:
    """Build the service; nothing connects until ``start()``."""
    return ServiceApp(NAME, settings, subscriptions=subscriptions())
