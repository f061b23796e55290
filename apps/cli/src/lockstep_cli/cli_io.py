"""What every ``lockstep`` command does with bad input and unreachable servers: one line on
stderr naming what is wrong, and an exit code (2 unless the command says otherwise), never a
traceback."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TextIO, TypeVar

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from lockstep_common.settings import ServiceSettings

    errors: Console  # standard error, made on first use (module __getattr__ below)

PIPE_WIDTH = 4096
"""Columns a table may take when standard output is a pipe or a file: as wide as its content."""
RULE_WIDTH = 80
"""Columns of a rule (a section heading) when piped: a rule fills the console's width, and at
``PIPE_WIDTH`` every one was 4,096 characters of a log file (issue 31)."""


def stdout_console(stream: TextIO | None = None) -> Console:
    """Standard output (or ``stream``) for people and for pipes (issue 14, item 6).

    No highlighting: rich's default colours every run of digits, so node ids and versions came
    out coloured digit by digit. Piped (``| grep``, ``> file``), nothing is wrapped at 80
    columns: a line holds one node or one version whole (``COLUMNS`` still wins if set).
    """
    from rich.console import Console

    out = stream or sys.stdout
    piped = not out.isatty()
    if piped and "COLUMNS" not in os.environ:
        return _pipe_console()(file=stream, highlight=False, soft_wrap=True, width=PIPE_WIDTH)
    return Console(file=stream, highlight=False, soft_wrap=piped)


@functools.cache
def _pipe_console() -> type[Console]:
    """A console whose lines are as wide as their content, rules included (rich is imported
    when this is first called)."""
    from rich.align import AlignMethod
    from rich.console import Console
    from rich.rule import Rule
    from rich.style import Style
    from rich.text import Text

    class PipeConsole(Console):
        def rule(
            self,
            title: str | Text = "",
            *,
            characters: str = "─",
            style: str | Style = "rule.line",
            align: AlignMethod = "center",
        ) -> None:
            rule = Rule(title=title, characters=characters, style=style, align=align)
            self.print(rule, width=RULE_WIDTH)

    return PipeConsole


@functools.cache
def stderr_console() -> Console:
    """Standard error for messages, made on first use."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False)


def __getattr__(name: str) -> Any:
    # rich is imported when something is printed with it, not by every command that imports
    # this module: `fleet admit` answers without it (PEP 562 module __getattr__).
    if name == "errors":
        return stderr_console()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


T = TypeVar("T")
S = TypeVar("S", bound="ServiceSettings")
# A command group's --data-dir and -v, for its command's settings_of: one invocation per
# process (the group's callback sets both before each command runs).
_choice: dict[str, Any] = {}
StackDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        envvar="LOCKSTEP_DATA_DIR",
        help="The data dir of the `lockstep up` to talk to, when LOCKSTEP_NATS_URL / "
        "LOCKSTEP_DATABASE_URL are not set (default: .data).",
        show_default=False,
    ),
]
VerboseOption = Annotated[
    bool, typer.Option("--verbose", "-v", help="Say which stack each command talks to.")
]


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` and exit with ``code``."""
    stderr_console().print(f"[red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def choose_stack(data_dir: Path | None, verbose: bool) -> None:
    """Keep a command group's ``--data-dir`` and ``-v`` for ``settings_of``."""
    _choice.update(data_dir=data_dir, verbose=verbose)


def chosen_stack() -> tuple[Path, bool]:
    """The data dir ``settings_of`` would read (``--data-dir``, ``LOCKSTEP_DATA_DIR``, or
    ``.data``) and whether ``-v`` was given."""
    data_dir = _choice.get("data_dir") or Path(os.environ.get("LOCKSTEP_DATA_DIR") or ".data")
    return data_dir, bool(_choice.get("verbose"))


def settings_of(settings_class: type[S], identity: str = "cli", *, find_stack: bool = True) -> S:
    """Settings from ``LOCKSTEP_*``; a bad variable is bad input: exit 2 naming it.

    Servers the environment does not name are those of the ``lockstep up`` running under
    ``--data-dir`` (``LOCKSTEP_DATA_DIR``, default ``.data``), reached as ``identity``; not
    with ``find_stack=False`` (``lockstep up`` itself).
    """
    from pydantic import ValidationError

    from lockstep_cli import stack_state
    from lockstep_common.settings import explain, unknown_variables

    for warning in unknown_variables(os.environ, settings_class):
        stderr_console().print(f"[yellow]warning:[/] {warning}", highlight=False)
    data_dir, _ = chosen_stack()
    defaults, source = (
        stack_state.connection_defaults(data_dir, identity, os.environ)
        if find_stack
        else ({}, "the environment")
    )
    try:
        settings = settings_class(**defaults)
    except ValidationError as exc:
        fail(f"settings: {explain(settings_class, exc)}")
    if _choice.get("verbose"):
        from lockstep_common.db import redact_dsn

        # Only the admin's commands (migrations, topology) use a database; an operator
        # command asks the services over the bus, so naming a DSN for it would mislead.
        database = (
            f"PostgreSQL {redact_dsn(settings.database_url)}, " if identity == "admin" else ""
        )
        stderr_console().print(
            f"stack: NATS {settings.nats_url} as {settings.nats_user or 'anonymous'}, "
            f"{database}namespace {settings.namespace} (from {source})",
            highlight=False,
        )
    return settings


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one command's coroutine; an unreachable server, a refused configuration or a
    database error is one line."""
    import asyncio

    from lockstep_common.errors import ConfigurationError, TransientError, describe

    try:
        return asyncio.run(coro)
    except (ConfigurationError, TransientError) as exc:
        fail(str(exc))  # a server is named with its password redacted (db.connect_with_retry)
    except OSError as exc:
        fail(describe(exc))
    except Exception as exc:
        # A database error can only come from a command that loaded the driver: asyncpg is
        # not imported for the others (`fleet admit` starts without it).
        asyncpg = sys.modules.get("asyncpg")
        if asyncpg is not None and isinstance(exc, asyncpg.PostgresError):
            fail(describe(exc))
        raise
