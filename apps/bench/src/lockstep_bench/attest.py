"""``lockstep bench attest``: verification MB/s of a bundle vs plain hashlib SHA-384.

The bundle is real and complete (signed manifest, PLDM package, SWID RIM, S.A.F.E. report,
SBOM) plus bulk images up to the requested size. The baseline, in the same run over the same
files, is single-threaded ``hashlib.sha384`` reading each file once in 8 MiB chunks: the least
any verifier must do. Both read from the page cache (the build pass warmed it), so the ratio
measures verification overhead, not the disk.
"""

from __future__ import annotations

import hashlib
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CHUNK = 8 << 20


def _baseline(images: list[Path]) -> float:
    started = time.perf_counter()
    for path in images:
        h = hashlib.sha384()
        with path.open("rb", buffering=0) as f:
            while chunk := f.read(CHUNK):
                h.update(chunk)
    return time.perf_counter() - started


def run_bench(gib: float, runs: int) -> dict[str, Any]:
    """Build the bundle once; alternate baseline and verification ``runs`` times."""
    from lockstep_attest.testing.bundles import make_kit
    from lockstep_attestation.policy import Policy
    from lockstep_attestation.trust_store import load_trust_store
    from lockstep_attestation.verification import verify_bundle

    tmp = Path(tempfile.mkdtemp(prefix="lockstep-bench-attest-"))
    try:
        count = max(1, round(gib * 8))
        size = int(gib * (1 << 30) / count)
        kit = make_kit(tmp, bulk=(count, size))
        images = sorted((kit.bundle / "images").iterdir())
        total = sum(p.stat().st_size for p in images)
        trust = load_trust_store(kit.trust)
        ours, base, accepted = [], [], True
        for _ in range(runs):
            base.append(total / _baseline(images) / 1e6)
            started = time.perf_counter()
            verdict = verify_bundle(kit.bundle, trust, Policy(), now=datetime.now(UTC))
            ours.append(total / (time.perf_counter() - started) / 1e6)
            accepted = accepted and verdict.accepted
        if not accepted:
            raise RuntimeError(
                "the benchmark bundle did not verify; the figures would be meaningless"
            )
        return {
            "bytes": total,
            "images": len(images),
            "runs": runs,
            "mb_per_s": round(statistics.median(ours), 1),
            "baseline_mb_per_s": round(statistics.median(base), 1),
            "ratio": round(statistics.median(o / b for o, b in zip(ours, base, strict=True)), 3),
            "per_run": [
                {"mb_per_s": round(o, 1), "baseline_mb_per_s": round(b, 1)}
                for o, b in zip(ours, base, strict=True)
            ],
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
