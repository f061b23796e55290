"""Where the real third-party artifacts live (NVIDIA Redfish captures, DMTF CSDL, S.A.F.E.
reports, PLDM packages, CoRIM): ``shared/reference`` of the workspace the repository belongs to.

Looked up in order: ``LOCKSTEP_SHARED_DIR``; a ``shared`` folder beside the clone (the usual
layout, ``../shared``); the workspace's fixed location ``/work/shared``. A clone made anywhere
else (``git clone . /tmp/x``) still finds them. When none exists, the path beside the clone is
returned, so a test that needs the artifacts fails naming where it looked: never a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _shared() -> Path:
    configured = os.environ.get("LOCKSTEP_SHARED_DIR")
    candidates = [Path(configured)] if configured else []
    candidates += [REPO.parent / "shared", Path("/work/shared")]
    return next((c for c in candidates if (c / "reference").is_dir()), candidates[0])


REFERENCE = _shared() / "reference"
