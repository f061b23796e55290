"""Where the embedded servers keep their files under a data directory.

Without the servers' code: a command that reaches a running stack (``lockstep fleet admit``
from a Slurm prolog) needs the CA's path, not bcrypt or cryptography.
"""

from __future__ import annotations

from pathlib import Path


def ca_file(data_dir: Path) -> Path:
    """The CA certificate of the embedded NATS whose state is in ``data_dir``."""
    return data_dir / "tls" / "ca.pem"
