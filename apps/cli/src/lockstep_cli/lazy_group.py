"""Command groups loaded when used: ``lockstep --help`` and ``lockstep fleet admit`` import only
what they run (issue 14, item 7: a Slurm prolog runs ``fleet admit`` for every job).

The top-level group knows each lazy group by a :class:`Lazy` entry (module, attribute, the
group's help); the module is imported when the group is invoked (``lockstep fleet ...``, also
``lockstep fleet --help``). The top-level help lists every group with the help its entry
repeats: tests/unit/cli/test_startup_imports.py checks that each entry's help is the loaded
group's, so the listing cannot drift from the groups.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any, ClassVar

import typer
import typer.main

# typer 0.29 vendors click as typer._click: TyperGroup and its contexts are built on it, not
# on the click package (the lazy-group pattern of click's docs, "Lazily Loading Subcommands").
from typer._click import Command, Context, HelpFormatter
from typer._click.exceptions import ClickException, UsageError
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True, slots=True)
class Lazy:
    """A command group defined as ``attribute`` (a ``typer.Typer``) in ``module``; with
    ``command``, one command: ``attribute`` is its function (``lockstep demo``)."""

    module: str
    attribute: str
    help: str
    command: bool = False

    def load(self, name: str, parent: TyperGroup) -> Command:
        """The group as ``app.add_typer(group, name=name)`` on ``parent``'s app builds it (the
        command as ``app.command(name)(function)`` does)."""
        try:
            target = getattr(importlib.import_module(self.module), self.attribute)
        except ModuleNotFoundError as exc:
            # lockstep_bench is a workspace member of its own (apps/bench): an installation
            # of the CLI alone lacks it. One line, not a traceback.
            if exc.name is None or not self.module.startswith(exc.name.split(".")[0]):
                raise
            raise ClickException(
                f"`lockstep {name}` needs the {exc.name.split('.')[0]} package, not installed "
                "here (./dev installs the whole workspace)"
            ) from None
        holder = typer.Typer()  # add_typer's and command's defaults, as eager registration had
        if self.command:
            if not callable(target) or isinstance(target, typer.Typer):
                raise TypeError(f"{self.module}.{self.attribute} is not a function")
            holder.command(name=name)(target)
            return typer.main.get_command_from_info(
                holder.registered_commands[0],
                pretty_exceptions_short=holder.pretty_exceptions_short,
                rich_markup_mode=parent.rich_markup_mode,
            )
        if not isinstance(target, typer.Typer):
            raise TypeError(f"{self.module}.{self.attribute} is not a typer.Typer")
        holder.add_typer(target, name=name)
        return typer.main.get_group_from_info(
            holder.registered_groups[0],
            pretty_exceptions_short=holder.pretty_exceptions_short,
            rich_markup_mode=parent.rich_markup_mode,
            suggest_commands=parent.suggest_commands,
        )


class _Listed(TyperCommand):
    """What the top-level help shows for a group it has not loaded: its name and help."""

    def __init__(self, name: str, help: str) -> None:
        super().__init__(name=name, help=help)


class LazyGroup(TyperGroup):
    """A ``TyperGroup`` whose subclasses name groups in ``lazy``, loaded on first use."""

    lazy: ClassVar[dict[str, Lazy]] = {}

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._listing = False

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in self.lazy if n not in self.commands)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        loaded = super().get_command(ctx, cmd_name)
        entry = self.lazy.get(cmd_name)
        if loaded is not None or entry is None:
            return loaded
        if self._listing:
            return _Listed(cmd_name, entry.help)
        command = entry.load(cmd_name, self)
        self.commands[cmd_name] = command
        return command

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        # Listing the groups needs their names and help only: nothing is imported for it.
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        # TyperGroup suggests among the loaded commands only: suggest among every group.
        try:
            return self._click_resolve_command(ctx, args)
        except UsageError as exc:
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if self.suggest_commands and matches:
                suggestions = ", ".join(repr(m) for m in matches)
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {suggestions}?"
            raise
