"""``lockstep bmc``: one BMC, read directly, before it joins a fleet.

``lockstep bmc probe URL --credentials REF`` says which BMC profile the BMC matches (and why),
how it would be flashed (login, push method and URI, targets per component, activation, what a
task-less answer means, downgrades, second bank, gap between pushes) and what preflight would
refuse, one line per refusal naming the BMC, the profile and what is missing: the privileges the
profile's calls need (DSP8011) against those the account holds (an account holding
ConfigureUsers, or ConfigureManager the profile does not need, is refused as the updater refuses
it), and whether the BMC takes the profile's activation reset and its ResetType. It writes
nothing to the BMC: GETs, and one login and logout (``lockstep_redfish.probe``).
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit

import typer

from lockstep_cli.cli_io import fail, run, stdout_console

if TYPE_CHECKING:
    from lockstep_redfish.probe import ProbeReport

bmc_app = typer.Typer(
    help="One BMC before it joins a fleet: which profile it matches, how it would be flashed.",
    no_args_is_help=True,
    add_completion=False,
)


@bmc_app.command("probe")
def probe(
    url: Annotated[str, typer.Argument(help="The BMC: https://host[:port].")],
    credentials: Annotated[
        str,
        typer.Option(
            help="Credential reference (env:PREFIX or file:/path; a file only its owner may "
            "read), as `fleet import --credentials` takes."
        ),
    ],
    node: Annotated[
        str | None,
        typer.Option(help="Node id the credentials are looked up by (default: the URL's host)."),
    ] = None,
    profile: Annotated[
        str | None, typer.Option(help="Use this BMC profile instead of choosing one.")
    ] = None,
    component: Annotated[
        list[str] | None,
        typer.Option(help="Only this component (repeat); default: every one the BMC holds."),
    ] = None,
    allow_plain_http: Annotated[
        bool,
        typer.Option(
            help="Allow an http:// BMC (a lab or simulated one): the password is sent in clear."
        ),
    ] = False,
    ca_file: Annotated[
        Path | None,
        typer.Option(help="Verify the BMC's certificate against these CA certificates (PEM)."),
    ] = None,
    insecure: Annotated[
        bool, typer.Option(help="Do not verify the BMC's TLS certificate (logged).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Which profile a BMC matches, how it would be flashed, what preflight would refuse.

    Also the privileges the profile's calls need (DSP8011) and those the account holds: an
    account lacking one, or holding ConfigureUsers or a ConfigureManager the profile does not
    need, is refused, as is a BMC whose activation reset does not allow the profile's ResetType.

    Exits 0 when preflight would refuse nothing, 1 when it would refuse something (each reason
    printed), 2 when the BMC cannot be read.
    """
    from lockstep_common.vocabulary import Component
    from lockstep_redfish import BmcError, BmcTarget, RedfishClient, RetryPolicy
    from lockstep_redfish.credentials import RegistryCredentials, reference_problem
    from lockstep_redfish.errors import CredentialError
    from lockstep_redfish.probe import probe as probe_bmc
    from lockstep_redfish.profile import profile_named

    kind = credentials.partition(":")[0]
    if kind not in {"env", "file"}:
        fail(f"--credentials {credentials!r}: expected env:PREFIX or file:/path")
    problem = reference_problem(credentials)
    if problem is not None:
        fail(f"--credentials {problem}")
    try:
        wanted = [Component(c) for c in component] if component else None
    except ValueError as exc:
        fail(f"--component: {exc}")
    if profile is not None:
        try:
            profile_named(profile)
        except ValueError as exc:
            fail(f"--profile: {exc}")
    node_id = node or urlsplit(url).hostname or url
    verify: bool | ssl.SSLContext | None = False if insecure else None
    if ca_file is not None:
        try:
            verify = ssl.create_default_context(cafile=str(ca_file))
        except (OSError, ssl.SSLError) as exc:
            fail(f"--ca-file {ca_file}: {exc}")
    try:
        target = BmcTarget(node_id, url, allow_plain_http=allow_plain_http, verify_tls=verify)
    except ValueError as exc:
        fail(str(exc))
    client = RedfishClient(
        RegistryCredentials({node_id: credentials}), RetryPolicy(timeout_s=15.0, retries=1)
    )
    try:
        found = run(probe_bmc(client, target, profile_id=profile, components=wanted))
    except (BmcError, CredentialError) as exc:
        fail(f"{node_id}: {exc}")
    if as_json:
        print(json.dumps(found.as_json(), indent=2))
    else:
        _print(found)
    raise typer.Exit(1 if found.refusals else 0)


def _print(found: ProbeReport) -> None:
    console = stdout_console()
    console.print(f"BMC {found.bmc}: profile {found.profile}", highlight=False)
    because = ", ".join(found.because) or "nothing more specific matched"
    console.print(f"  because: {because} (matched: {', '.join(found.candidates)})", highlight=False)
    rows = [
        ("login", found.login),
        ("push", f"{found.push or 'none offered'} {found.push_uri or ''}".rstrip()),
        ("activation", found.activation),
        ("task-less answer", found.taskless),
        ("downgrade", found.downgrade),
        ("second bank", found.bank),
        ("gap between pushes", f"{found.min_gap_s:g}s"),
    ]
    for name, value in rows:
        console.print(f"  {name}: {value}", highlight=False)
    for comp, ids in found.targets.items():
        console.print(f"  {comp}: {', '.join(ids)}", highlight=False)
    for privilege, calls in found.privileges_needed.items():
        console.print(f"  needs {privilege}: {'; '.join(calls)}", highlight=False)
    held = found.privileges_held
    console.print(
        f"  account holds: {'(not said by the BMC)' if held is None else ', '.join(held)}",
        highlight=False,
    )
    for line in found.refusals:
        console.print(f"refused: {line}", highlight=False)
    if not found.refusals:
        console.print("preflight: nothing refused", highlight=False)
