"""What every ``lockstep`` command does with bad input and unreachable servers: one line on
stderr naming what is wrong, and an exit code (2 unless the command says otherwise), never a
traceback."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console

errors = Console(stderr=True, soft_wrap=True)
T = TypeVar("T")
S = TypeVar("S")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` and exit with ``code``."""
    errors.print(f"[red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def settings_of(settings_class: type[S]) -> S:
    """Settings from ``LOCKSTEP_*``; a bad variable is bad input: exit 2 naming it."""
    from pydantic import ValidationError

    from lockstep_common.settings import ServiceSettings, explain

    try:
        return settings_class()
    except ValidationError as exc:
        assert issubclass(settings_class, ServiceSettings)  # noqa: S101 - every caller's class
        fail(f"settings: {explain(settings_class, exc)}")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one command's coroutine; an unreachable server, a refused configuration or a
    database error is one line."""
    import asyncpg

    from lockstep_common.errors import ConfigurationError, TransientError, describe

    try:
        return asyncio.run(coro)
    except (ConfigurationError, TransientError) as exc:
        fail(str(exc))  # a server is named with its password redacted (db.connect_with_retry)
    except (OSError, asyncpg.PostgresError) as exc:
        fail(describe(exc))
