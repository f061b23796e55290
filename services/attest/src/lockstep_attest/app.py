"""Composition root of the attest service: the only place its dependencies are built."""

from __future__ import annotations

from lockstep_attest.router import subscriptions
from lockstep_attest.settings import Settings
from lockstep_common.service import ServiceApp

NAME = "attest"


def create_app(settings: Settings | None = None) -> ServiceApp:
    """Build the service; nothing connects until ``start()``."""
    return ServiceApp(NAME, settings or Settings(), subscriptions=subscriptions())
