"""``lockstep bundle submit|list|show``: hand a bundle to the attest service and read its
verdicts, asked of the attest service over the bus (``lockstep_attest.operator_commands``):
no database.

``submit`` sends the bundle's path, not its bytes: the attest service reads it from its bundle
roots (LOCKSTEP_ATTEST_BUNDLE_ROOTS), so the path must be one the service can see. The
submitter recorded is the identity the CLI connects as; ``reader`` may list and show only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar
from urllib.parse import urlparse

import typer
from rich.markup import escape
from rich.table import Table

from lockstep_cli.cli_io import StackDirOption, choose_stack, fail, settings_of, stdout_console

if TYPE_CHECKING:
    from lockstep_common.envelope import EventData
    from lockstep_common.events.v1 import BundleShowAnswered, BundleSummary

console = stdout_console()
ATTEST = "attest"
A = TypeVar("A", bound="EventData")
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON only.")]
JobArg = Annotated[int, typer.Argument(min=1, help="The submission's id (from submit or list).")]


def _ask(command: str, request: EventData, answer: type[A]) -> A:
    from lockstep_cli.ops_client import ask
    from lockstep_common.settings import ServiceSettings

    return ask(settings_of(ServiceSettings), ATTEST, command, request, answer)


def _uri(path: str) -> str:
    """A local path made absolute (the service resolves nothing relative to the CLI's
    directory); a URI is passed on as written, for the service to accept or refuse."""
    if urlparse(path).scheme:
        return path
    return str(Path(path).absolute())


def submit(
    path: Annotated[
        str,
        typer.Argument(
            help="Bundle directory or tar, as the attest service sees it (below its bundle roots)."
        ),
    ],
    note: Annotated[str | None, typer.Option(help="Why it is submitted.")] = None,
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait",
            min=0.1,
            help="Wait up to this many seconds for the verdict and print it as `show` does "
            "(exit 1 rejected, 3 not verified in time).",
        ),
    ] = None,
    data_dir: StackDirOption = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a bundle for attestation; `lockstep bundle show ID` gives its verdict."""
    from pydantic import ValidationError

    from lockstep_common.events.v1 import BundleSubmitAnswered, BundleSubmitRequested

    choose_stack(data_dir, False)
    try:
        request = BundleSubmitRequested(bundle_uri=_uri(path), note=note)
    except ValidationError as exc:
        fail(f"{escape(path[:80])}: {exc.errors()[0]['msg']}")
    answer = _ask("bundle.submit", request, BundleSubmitAnswered)
    if wait is not None:
        _print(_verdict(answer.job_id, wait), as_json)
        return
    if as_json:
        print(answer.model_dump_json())
        return
    console.print(
        f"submitted {escape(answer.bundle_uri)} as bundle {answer.job_id}; "
        f"`lockstep bundle show {answer.job_id}` gives its verdict",
        highlight=False,
    )


def _line(b: BundleSummary) -> str:
    what = f"{b.bundle_id} {b.bundle_version}" if b.bundle_id else b.bundle_uri
    return f"bundle {b.job_id} ({what}): {b.state}"


def list_bundles(
    limit: Annotated[
        int, typer.Option(min=1, max=10_000, help="Newest first, at most this many.")
    ] = 50,
    data_dir: StackDirOption = None,
    as_json: JsonOpt = False,
) -> None:
    """Submitted bundles, newest first: state (pending, running, attested, rejected), bundle
    id and version, and a rejection's first failed check."""
    from lockstep_common.events.v1 import (
        MAX_BUNDLE_PAGE,
        BundleListAnswered,
        BundleListRequested,
    )

    choose_stack(data_dir, False)
    found: list[BundleSummary] = []
    before: int | None = None
    while len(found) < limit:
        request = BundleListRequested(before=before, limit=min(MAX_BUNDLE_PAGE, limit - len(found)))
        page = _ask("bundle.list", request, BundleListAnswered)
        found += page.bundles
        before = page.next_before
        if before is None:
            break
    if as_json:
        print(json.dumps([b.model_dump(mode="json") for b in found]))
        return
    if not found:
        console.print("no bundles submitted yet (`lockstep bundle submit PATH`)")
        return
    table = Table(title="bundles, newest first")
    for column in ("id", "submitted", "by", "state", "bundle", "version", "bundle path", "reason"):
        table.add_column(column)
    for b in found:
        table.add_row(
            str(b.job_id), b.submitted_at.isoformat(timespec="seconds"), b.submitted_by,
            b.state, b.bundle_id or "", b.bundle_version or "", b.bundle_uri, b.reason or "",
        )  # fmt: skip
    console.print(table)


def show(job_id: JobArg, data_dir: StackDirOption = None, as_json: JsonOpt = False) -> None:
    """One submission and every check of its verdict with its outcome and reason. Exit 1
    when the bundle was rejected."""
    from lockstep_common.events.v1 import BundleShowAnswered, BundleShowRequested

    choose_stack(data_dir, False)
    _print(_ask("bundle.show", BundleShowRequested(job_id=job_id), BundleShowAnswered), as_json)


def _verdict(job_id: int, wait_s: float) -> BundleShowAnswered:
    """The submission once verified, asked again until then (``polling.until``); exit 3 when
    it is not verified within ``wait_s``."""
    import asyncio

    from lockstep_cli.cli_io import run
    from lockstep_cli.polling import until
    from lockstep_common.events.v1 import BundleShowAnswered, BundleShowRequested

    async def verified() -> BundleShowAnswered | None:
        request = BundleShowRequested(job_id=job_id)
        answer = await asyncio.to_thread(_ask, "bundle.show", request, BundleShowAnswered)
        return None if answer.bundle.state in ("pending", "running") else answer

    try:
        return run(until(verified, f"bundle {job_id}'s verdict", timeout_s=wait_s, poll_s=0.5))
    except TimeoutError:
        fail(f"bundle {job_id} not verified within {wait_s:g}s: `lockstep bundle show {job_id}`", 3)


def _print(answer: BundleShowAnswered, as_json: bool) -> None:
    """A submission as ``show`` prints it; exit 1 when the bundle was rejected."""
    if as_json:
        print(answer.model_dump_json())
    else:
        b = answer.bundle
        console.print(escape(_line(b)), highlight=False)
        console.print(f"  path: {escape(b.bundle_uri)}", highlight=False)
        console.print(
            f"  submitted by {b.submitted_by} at {b.submitted_at.isoformat(timespec='seconds')}",
            highlight=False,
        )
        if b.stack_hash:
            console.print(f"  stack hash: {b.stack_hash}", highlight=False)
        if answer.reused_from is not None:
            console.print(f"  verdict reused from bundle {answer.reused_from} (identical bytes)")
        if b.state in ("pending", "running"):
            console.print("  not verified yet: ask again shortly")
        else:
            table = Table()
            for column in ("check", "result", "reason"):
                table.add_column(column)
            for c in answer.checks:
                table.add_row(c.check, c.result.value, escape(c.reason))
            console.print(table)
    if answer.bundle.state == "rejected":
        raise typer.Exit(1)
