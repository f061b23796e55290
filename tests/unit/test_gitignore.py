"""Every file the README's walkthrough writes into the repository is ignored by git: bmc.json
holds a BMC password (issue 31: it could be committed by a `git add .`)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
GIT = shutil.which("git")


def walkthrough_outputs() -> set[str]:
    """Files the README's shell blocks write with ``>`` (not ``>>`` to a path elsewhere)."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.DOTALL)
    names = {m for block in blocks for m in re.findall(r"(?<![>&0-9])> ?([\w.-]+)\b", block)}
    return {n for n in names if "." in n and n != "/dev/null"}


@pytest.mark.skipif(GIT is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_the_walkthrough_writes_nothing_git_would_commit() -> None:
    assert GIT is not None
    outputs = walkthrough_outputs()
    assert {"bmc.json", "stack.yaml", "pin.json"} <= outputs, outputs
    for name in sorted(outputs):
        ignored = subprocess.run(
            [GIT, "-C", str(ROOT), "check-ignore", "-q", name], check=False
        ).returncode
        assert ignored == 0, f"{name}: the README writes it in the repository, git would commit it"


FIRST_ROLLOUT = (
    "signing.key",
    "approver/alice.key",
    "trust/trust.json",
    "release/first/manifest.json",
    "classes.yaml",
    "start.json",
)
"""What "Your first rollout" writes in the working directory: two private keys among them."""


@pytest.mark.skipif(GIT is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_the_first_rollout_writes_nothing_git_would_commit() -> None:
    assert GIT is not None
    readme = (ROOT / "README.md").read_text()
    for name in FIRST_ROLLOUT:
        assert name.split("/")[0] in readme, f"{name}: the README no longer writes it"
        ignored = subprocess.run(
            [GIT, "-C", str(ROOT), "check-ignore", "-q", name], check=False
        ).returncode
        assert ignored == 0, f"{name}: the README writes it in the repository, git would commit it"
