"""``python -m lockstep_console``: the console as ``lockstep up`` starts it, with the same
options as ``lockstep console``."""

from __future__ import annotations

import typer

from lockstep_console.cli import console


def main() -> None:
    typer.run(console)


if __name__ == "__main__":
    main()
