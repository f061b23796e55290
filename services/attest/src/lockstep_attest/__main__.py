"""``python -m lockstep_attest``: run the attest service until SIGINT or SIGTERM."""

from __future__ import annotations

from lockstep_attest.app import create_app
from lockstep_attest.settings import Settings
from lockstep_common.service import run_service


def main() -> None:
    """Entry point."""
    run_service(create_app, Settings)


if __name__ == "__main__":
    main()
