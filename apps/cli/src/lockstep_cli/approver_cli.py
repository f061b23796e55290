"""``lockstep approver keygen NAME``: an approver's Ed25519 key pair, for ``lockstep rollout
approve --key``.

The private key (``NAME.key``, mode 0600, unencrypted PKCS#8 PEM as ``rollout approve`` reads
it) stays with the approver; the public key (``NAME.pem``) goes into the planner's approvers
trust store (``LOCKSTEP_PLANNER_APPROVERS_DIR``), where the file's stem is the approver's name
(docs/rollouts.md, "Approvals"). Nothing is overwritten: an approver's key is replaced on
purpose, by removing the old one first.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

import typer

from lockstep_cli.cli_io import fail, stdout_console

approver_app = typer.Typer(
    help="Approvers: make the Ed25519 key pair that signs rollout approvals.",
    no_args_is_help=True,
)
console = stdout_console()
# The name is a file's stem in the trust store and the approval's "approver": a plain token.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` from the start (never a moment world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


@approver_app.command("keygen")
def keygen(
    name: Annotated[str, typer.Argument(help="The approver's name, e.g. alice (the .pem's stem).")],
    out: Annotated[
        Path, typer.Option("--out", help="Directory for NAME.key and NAME.pem (made 0700).")
    ] = Path(),
) -> None:
    """Write NAME.key (private, 0600) and NAME.pem (public) for an approver; copy NAME.pem into
    the planner's approvers directory (LOCKSTEP_PLANNER_APPROVERS_DIR) and approve with
    `lockstep rollout approve ROLLOUT --key NAME.key --as NAME`."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if not NAME.fullmatch(name):
        fail(
            f"approver name {name!r}: letters, digits, '.', '_' or '-', at most 64, no leading dot"
        )
    key_file, pem_file = out / f"{name}.key", out / f"{name}.pem"
    for existing in (key_file, pem_file):
        if existing.exists():
            fail(f"{existing} exists: nothing written (remove it to make a new key)")
    try:
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
        private = Ed25519PrivateKey.generate()
        _write_new(
            key_file,
            private.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
            0o600,
        )
        _write_new(
            pem_file,
            private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            0o644,
        )
    except OSError as exc:
        fail(f"{out}: {exc.strerror or exc}")
    console.print(
        f"wrote {key_file} (private, keep it: mode 0600) and {pem_file} (public).\n"
        f"Copy {pem_file.name} into the planner's approvers directory "
        "(LOCKSTEP_PLANNER_APPROVERS_DIR; restart the planner to read it), then approve with:\n"
        f"  lockstep rollout approve ROLLOUT --key {key_file} --as {name}",
        highlight=False,
        soft_wrap=True,
    )
