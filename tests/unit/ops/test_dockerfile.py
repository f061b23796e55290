"""The Dockerfile is well-formed: every logical line (continuations joined, as the Dockerfile
reference says) is one known instruction, every RUN is a shell command bash accepts with no
Dockerfile instruction inside it (a garbled merge), and the user the image runs as is created
with one name and the uid the deployment's files are owned by. No image is built here."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.ops.metric_names import ROOT

pytestmark = pytest.mark.unit

DOCKERFILE = ROOT / "Dockerfile"
# https://docs.docker.com/reference/dockerfile/#overview
INSTRUCTIONS = frozenset(
    {
        "ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK",
        "LABEL", "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME",
        "WORKDIR",
    }
)  # fmt: skip
# useradd(8)'s options this image may use, and how many values each takes.
USERADD_OPTIONS = {"--system": 0, "--uid": 1, "--home-dir": 1, "--shell": 1, "--no-create-home": 0}
UID = "10001"  # the owner of the deployment's secret files (compose.yaml, init-roles.sh)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, instruction line) with ``\\``-continuations joined; comment lines,
    also inside a continuation, dropped (the reference's parsing rules, default escape)."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if not pending:
            start = number
        continued = line.endswith("\\")
        pending.append(line[:-1] if continued else line)
        if not continued:
            out.append((start, " ".join(p.strip() for p in pending)))
            pending = []
    assert not pending, f"line {start}: the file ends inside a continuation"
    return out


def commands(shell: str) -> list[list[str]]:
    """The simple commands of a shell line, split at ``&&``, ``||``, ``;`` and ``|``."""
    lexer = shlex.shlex(shell, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    found: list[list[str]] = [[]]
    for token in lexer:
        if token in {"&&", "||", ";", "|"}:
            found.append([])
        else:
            found[-1].append(token)
    return [c for c in found if c]


def operands(argv: list[str]) -> list[str]:
    """``useradd``'s operands once its options and their values are taken out."""
    rest, args = [], iter(argv[1:])
    for arg in args:
        if arg.startswith("-"):
            assert arg in USERADD_OPTIONS, f"useradd option {arg} not known to this test"
            for _ in range(USERADD_OPTIONS[arg]):
                next(args)
        else:
            rest.append(arg)
    return rest


def runs() -> list[tuple[int, str]]:
    return [
        (n, line[4:]) for n, line in logical_lines(DOCKERFILE.read_text()) if line[:4] == "RUN "
    ]


def test_every_line_is_one_known_instruction() -> None:
    lines = logical_lines(DOCKERFILE.read_text())
    assert [line.split()[0] for _, line in lines].count("FROM") == 1
    for number, line in lines:
        assert line.split()[0] in INSTRUCTIONS, f"line {number}: {line[:60]!r}"


BASH = shutil.which("bash")


@pytest.mark.skipif(BASH is None, reason="no bash to check the RUN lines with")
def test_every_run_is_a_shell_command_with_no_instruction_inside() -> None:
    assert BASH is not None
    for number, shell in runs():
        checked = subprocess.run(
            [BASH, "-n", "-c", shell], capture_output=True, text=True, check=False
        )
        assert checked.returncode == 0, f"line {number}: {checked.stderr}"
        for argv in commands(shell):
            inside = [w for w in argv if w in INSTRUCTIONS]
            assert not inside, f"line {number}: {inside} inside a RUN (a garbled merge?)"


def test_the_image_user_is_created_once_with_one_name_and_the_deployments_uid() -> None:
    made = [
        (number, argv) for number, shell in runs() for argv in commands(shell)
        if argv[0] == "useradd"
    ]  # fmt: skip
    assert len(made) == 1, made
    number, argv = made[0]
    assert operands(argv) == ["lockstep"], f"line {number}: useradd {operands(argv)}"
    assert argv[argv.index("--uid") + 1] == UID
    users = [
        line.split()[1] for _, line in logical_lines(DOCKERFILE.read_text()) if line[:5] == "USER "
    ]
    assert users == ["lockstep"]


@pytest.mark.skipif(BASH is None, reason="no bash to run the RUN line with")
@pytest.mark.parametrize(
    ("value", "code", "installed"),
    [("1", 0, "slurm-client munge"), ("0", 0, ""), ("yes", 1, "")],
)
def test_the_slurm_clients_and_munge_are_installed_only_when_asked(
    tmp_path: Path, value: str, code: int, installed: str
) -> None:
    """Issue 31: the Slurm adapter needs squeue, scontrol and munge; SLURM_CLIENTS=1 adds them,
    0 (the default) keeps the image without them, anything else stops the build."""
    assert BASH is not None
    [arg] = [line for _, line in logical_lines(DOCKERFILE.read_text()) if "SLURM_CLIENTS" in line
             and line.startswith("ARG ")]  # fmt: skip
    assert arg == "ARG SLURM_CLIENTS=0"
    [(_, shell)] = [(n, s) for n, s in runs() if "$SLURM_CLIENTS" in s]
    calls = tmp_path / "calls"
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("apt-get", "rm"):
        (fake / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n')
        (fake / tool).chmod(0o755)
    done = subprocess.run(
        [BASH, "-c", shell],
        env={"PATH": f"{fake}:/usr/bin:/bin", "SLURM_CLIENTS": value},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == code, done.stderr
    lines = calls.read_text().splitlines() if calls.exists() else []
    install = [c for c in lines if c.startswith("apt-get install")]
    assert install == (
        [f"apt-get install -y --no-install-recommends {installed}"] if installed else []
    )
    if code:
        assert done.stderr == "SLURM_CLIENTS must be 0 or 1, not yes\n"
