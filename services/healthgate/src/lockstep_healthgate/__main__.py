"""``python -m lockstep_healthgate``: run the healthgate service until SIGINT or SIGTERM."""

from __future__ import annotations

from lockstep_common.service import run_service
from lockstep_healthgate.app import create_app
from lockstep_healthgate.settings import Settings


def main() -> None:
    """Entry point."""
    run_service(create_app, Settings)


if __name__ == "__main__":
    main()
