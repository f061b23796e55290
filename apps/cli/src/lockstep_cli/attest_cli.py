"""``lockstep bundle ...`` and ``lockstep attest ...``: build and verify bundles and evidence.

Exit codes: 0 only when the thing verified; 1 when it did not (the output says which check
failed); 2 for bad input (a missing file, an unreadable key), which changes nothing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from lockstep_cli import bundle_ops
from lockstep_cli.cli_io import errors, stdout_console

bundle_app = typer.Typer(help="Build and verify release bundles.", no_args_is_help=True)
attest_app = typer.Typer(help="Verify single pieces of evidence.", no_args_is_help=True)
rim_app = typer.Typer(help="Reference Integrity Manifests.", no_args_is_help=True)
sfr_app = typer.Typer(help="OCP S.A.F.E. short-form reports.", no_args_is_help=True)
attest_app.add_typer(rim_app, name="rim")
attest_app.add_typer(sfr_app, name="sfr")
console = stdout_console()


def _fail(message: object) -> typer.Exit:
    """Report bad input (exit 2): nothing was changed."""
    errors.print(f"[red]error:[/] {message}", markup=True, highlight=False)
    return typer.Exit(2)


AsJson = Annotated[bool, typer.Option("--json", help="Print JSON only.")]


def _time(value: str | None) -> datetime:
    if value is None:
        return datetime.now(UTC)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not an ISO 8601 time") from None
    if parsed.tzinfo is None:
        raise typer.BadParameter(f"{value!r} needs a time zone (e.g. 2026-01-01T00:00:00Z)")
    return parsed


def _emit(result: dict[str, Any], ok: bool, as_json: bool, title: str) -> None:
    if as_json:
        print(json.dumps(result, default=str))
    else:
        table = Table(title=f"{title}: {'[green]VALID[/]' if ok else '[red]INVALID[/]'}")
        for col in ("check", "result", "reason"):
            table.add_column(col)
        for c in result.get("checks", []):
            table.add_row(c["check"], c["result"], c["reason"])
        console.print(table)
    if not ok:
        raise typer.Exit(1)


@bundle_app.command("build")
def bundle_build(
    directory: Annotated[Path, typer.Argument(help="Bundle directory with manifest.json.")],
    key: Annotated[Path, typer.Option(help="PEM private key (P-384 or Ed25519).")],
    kid: Annotated[str, typer.Option(help="Key id recorded in the signature.")],
) -> None:
    """Fill in image digests and sizes, and sign the canonical manifest (manifest.jws)."""
    from lockstep_attestation.builder import BuildError, build_bundle

    try:
        manifest = build_bundle(directory, key, kid)
    except BuildError as exc:
        raise _fail(exc) from None
    console.print(
        f"built {manifest.bundle_id} {manifest.bundle_version}: stack hash {manifest.stack_hash()}"
    )


@bundle_app.command("pldm")
def bundle_pldm(
    kind: Annotated[str, typer.Argument(help="Device kind, e.g. gpu, bmc, nic, cpld.")],
    version: Annotated[str, typer.Argument(help="The version the package installs.")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the package (new file).")],
    image: Annotated[
        Path | None,
        typer.Option(
            help="The firmware image to wrap (default: a placeholder the simulator takes)."
        ),
    ] = None,
    profile: Annotated[str, typer.Option(help="The simulated profile: gb200 or hgx-h100.")] = (
        "gb200"
    ),
) -> None:
    """Wrap a firmware image in a PLDM (DSP0267) package the simulator's BMCs accept for every
    device of KIND in the profile: the image a bundle's manifest names with "format": "pldm"."""
    from lockstep_sim.packages import PackageError, simulated_package

    if out.exists():
        raise _fail(f"{out} exists: nothing written")
    try:
        payload = image.read_bytes() if image is not None else None
        package = simulated_package(profile, kind, version, image=payload, at=datetime.now(UTC))
    except OSError as exc:
        raise _fail(f"{image}: {exc.strerror or exc}") from None
    except (PackageError, ValueError) as exc:
        raise _fail(exc) from None
    try:
        with out.open("xb") as f:
            f.write(package)
    except OSError as exc:
        raise _fail(f"{out}: {exc.strerror or exc}") from None
    console.print(f"wrote {out}: PLDM package of {kind} {version} for {profile} ({len(package)} B)")


@bundle_app.command("verify")
def bundle_verify(
    path: Annotated[Path, typer.Argument(help="Bundle directory or tar.")],
    trust_store: Annotated[Path, typer.Option(help="Trust store directory.")],
    policy: Annotated[Path | None, typer.Option(help="Policy JSON.")] = None,
    pinned: Annotated[Path | None, typer.Option(help="manifest.json of the pinned bundle.")] = None,
    at: Annotated[str | None, typer.Option(help="Verify as of this ISO 8601 time.")] = None,
    as_json: AsJson = False,
) -> None:
    """Run every check; exit 0 only when the bundle is attested."""
    from lockstep_attestation.policy import Policy
    from lockstep_attestation.trust_store import TrustStoreError, load_trust_store
    from lockstep_attestation.verification import verify_bundle
    from lockstep_common.bundle import Manifest

    try:
        trust = load_trust_store(trust_store)
        pol = Policy.model_validate_json(policy.read_bytes()) if policy else Policy()
        approvals = (
            [(policy.parent / p).read_bytes() for p in pol.rollback_approvals] if policy else []
        )
        pinned_manifest = Manifest.model_validate_json(pinned.read_bytes()) if pinned else None
    except (OSError, ValueError, TrustStoreError) as exc:
        raise _fail(exc) from None
    if not path.exists():
        raise _fail(f"{path} does not exist")
    verdict = verify_bundle(
        path, trust, pol, now=_time(at), pinned=pinned_manifest, approvals=approvals
    )
    result = {
        "attested": verdict.accepted,
        "stack_hash": verdict.stack_hash,
        "bundle_digest": verdict.bundle.digest,
        "read_ms": round(verdict.read_ms, 1),
        "checks": [c.model_dump(mode="json") for c in verdict.checks],
    }
    _emit(result, verdict.accepted, as_json, f"bundle {path}")


@rim_app.command("verify")
def rim_verify(
    file: Annotated[Path, typer.Argument(help="SWID RIM (.swidtag/.xml).")],
    trust_anchor: Annotated[Path, typer.Option(help="PEM root certificate.")],
    at: Annotated[
        str | None, typer.Option(help="Validate the chain as of this ISO 8601 time.")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Verify a RIM's signature and certificate chain; exit 0 only when valid."""
    from cryptography import x509

    from lockstep_attestation import swid

    try:
        anchor = x509.load_pem_x509_certificate(trust_anchor.read_bytes())
        data = file.read_bytes()
    except (OSError, ValueError) as exc:
        raise _fail(exc) from None
    try:
        rim = swid.verify_swid_rim(data, trust_anchor=anchor, at=_time(at))
    except (swid.RimError, ValueError) as exc:
        _emit(
            {"valid": False, "checks": [{"check": "rim", "result": "fail", "reason": str(exc)}]},
            False,
            as_json,
            str(file),
        )
        return
    reason = (
        f"{rim.name} {rim.colloquial_version}: signed by {rim.leaf_subject}, "
        f"{len(rim.measurements)} measurements"
    )
    _emit(
        {
            "valid": True,
            "checks": [{"check": "rim", "result": "pass", "reason": reason}],
            "colloquial_version": rim.colloquial_version,
        },
        True,
        as_json,
        str(file),
    )


@sfr_app.command("verify")
def sfr_verify(
    file: Annotated[Path, typer.Argument(help="Short-form report (.jws or signed .cbor).")],
    srp_keys: Annotated[Path, typer.Option(help="Review-provider public keys directory.")],
    image: Annotated[
        Path | None, typer.Option(help="Firmware image the report must cover.")
    ] = None,
    cvss_ceiling: Annotated[float, typer.Option(help="Open issues at or above this block.")] = 7.0,
    as_json: AsJson = False,
) -> None:
    """Verify a report's signature (and that it covers an image); exit 0 only when valid."""
    import hashlib

    from lockstep_attestation import safe
    from lockstep_attestation.key_files import load_srp_keys

    try:
        keys = load_srp_keys(srp_keys)
        data = file.read_bytes()
        image_bytes = image.read_bytes() if image else None
    except (OSError, ValueError) as exc:
        raise _fail(exc) from None
    checks = []
    try:
        report = safe.verify_sfr(data, keys)
        checks.append(
            {"check": "signature", "result": "pass", "reason": f"signed by {report.key_name}"}
        )
    except (safe.SfrError, ValueError) as exc:
        checks.append({"check": "signature", "result": "fail", "reason": str(exc)})
        _emit({"valid": False, "checks": checks}, False, as_json, str(file))
        return
    if image_bytes is not None:
        ok = safe.image_matches(
            report,
            sha384=hashlib.sha384(image_bytes).hexdigest(),
            sha512=hashlib.sha512(image_bytes).hexdigest(),
        )
        checks.append(
            {
                "check": "image_hash",
                "result": "pass" if ok else "fail",
                "reason": f"report {'covers' if ok else 'does not cover'} {image}",
            }
        )
    blocking = safe.blocking_issues(report, cvss_ceiling)
    checks.append(
        {
            "check": "issues",
            "result": "fail" if blocking else "pass",
            "reason": f"{len(blocking)} open issue(s) at or above {cvss_ceiling}",
        }
    )
    ok = all(c["result"] == "pass" for c in checks)
    _emit(
        {
            "valid": ok,
            "vendor": report.vendor,
            "product": report.product,
            "fw_version": report.fw_version,
            "checks": checks,
        },
        ok,
        as_json,
        str(file),
    )


# Submitting and reading verdicts ask the attest service over the bus (bundle_ops.py).
bundle_app.command("submit")(bundle_ops.submit)
bundle_app.command("list")(bundle_ops.list_bundles)
bundle_app.command("show")(bundle_ops.show)
