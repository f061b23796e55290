"""Commands start fast (issue 14, item 7): ``lockstep --help`` loads no command group, and
``lockstep fleet admit`` (a Slurm prolog runs it for every job) asks with the standard library
in the ordinary case (admit_quick.py, nats_request.py), loading no asyncio, nats-py, rich or
settings code.

Measured on the shared 2-core development machine (load average 7.6 from other agents), 20
interleaved runs each against a running `lockstep up`, main vs this change in the same minute,
both with compiled bytecode (`lockstep bench startup` measures the same): wall medians
`--help` 0.331 s -> 0.219 s, `fleet admit` (answered over TLS as `cli`) 0.782 s -> 0.289 s;
CPU medians 0.196 -> 0.122 s and 0.459 -> 0.152 s; `python -c pass` 0.020 s. main's admit
there already had the cheaper bcrypt check: against a stack hashing at cost 10 it was 1.7 s
wall at load 5.9. Of admit's time on a loaded machine, 0.1-0.2 s was the server's bcrypt check
of the password (cost 10, now 4) and 40 ms Nagle's algorithm (now TCP_NODELAY); what is left
is typer (which loads pydantic to coerce options), rich for --help, and the request.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import ClassVar

import pytest
import typer.main
from typer._click import Command, Context
from typer.core import TyperGroup
from typer.testing import CliRunner

from lockstep_cli.lazy_group import Lazy, LazyGroup
from lockstep_cli.main import GROUPS, app

pytestmark = pytest.mark.unit

# Modules only some commands need; importing any of them costs 50-300 ms.
HEAVY = (
    "asyncpg",
    "nats",
    "aiohttp",
    "scipy",
    "numpy",
    "pydantic_settings",
    "lockstep_devstack",
    "lockstep_inventory",
    "lockstep_planner",
    "lockstep_updater",
    "lockstep_healthgate",
    "lockstep_gate",  # numpy, scipy
    "lockstep_attest",
    "lockstep_attestation",  # cryptography, lxml, cbor2
    "lockstep_sim.runtime",
    "lockstep_cli.supervisor",
    "lockstep_bench",
)

# Every service's code: the operator CLI reaches the services over the bus (issue 26, item 3).
SERVICES = {
    "lockstep_inventory",
    "lockstep_planner",
    "lockstep_updater",
    "lockstep_healthgate",
    "lockstep_attest",
}


def loaded_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    """The HEAVY modules (or their submodules) loaded once ``code`` ran in a fresh process."""
    probe = (
        f"{code}\nimport sys, json\n"
        f"print(json.dumps(sorted({{m.split('.')[0] if m.split('.')[0] != 'lockstep_sim' "
        f"and m.split('.')[0] != 'lockstep_cli' else m for m in sys.modules}})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    ).stdout
    names = set(json.loads(out.strip().splitlines()[-1]))
    return {h for h in HEAVY if h in names}


def test_importing_the_cli_loads_no_heavy_module() -> None:
    assert loaded_after("import lockstep_cli.main") == set()


def test_fleet_admit_loads_no_database_server_or_service_runtime_code() -> None:
    # Exits 3 (NATS refused on port 1) after building its request: everything it needs ran.
    code = (
        "import os\n"
        "os.environ.update(LOCKSTEP_NATS_URL='nats://127.0.0.1:1', "
        "LOCKSTEP_DATABASE_URL='postgresql://u@127.0.0.1:1/x')\n"
        "from lockstep_cli.main import app\n"
        "try:\n"
        "    app(['fleet', 'admit', '--stack-hash', 'a' * 64, '--nodes', 'n1', "
        "'--timeout', '1'])\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 3, exit.code\n"
    )
    loaded = loaded_after(code)
    # What admit needs: NATS (and aiohttp, which nats-py imports), its settings class.
    assert loaded <= {"nats", "aiohttp", "pydantic_settings", "lockstep_inventory"}
    assert not {"asyncpg", "scipy", "lockstep_devstack", "lockstep_cli.supervisor"} & loaded


# What `lockstep fleet admit` in a Slurm prolog must not load: its quick path asks with the
# standard library (admit_quick.py, nats_request.py). pydantic itself is loaded by typer 0.29,
# which coerces every command's options with it.
NOT_FOR_ADMIT = SERVICES | {
    "lockstep_bench",
    "lockstep_gate",
    "lockstep_attestation",
    "nats",
    "aiohttp",
    "asyncio",
    "rich",
    "yaml",
    "pydantic_settings",
    "asyncpg",
    "lockstep_devstack",
    "lockstep_inventory",
    "lockstep_cli.fleet_bus",
    "lockstep_cli.fleet_views",
}
GROUP_MODULES = {
    "lockstep_cli.attest_cli",
    "lockstep_bench.cli",
    "lockstep_bench.demo_cli",
    "lockstep_cli.dlq_cli",
    "lockstep_cli.docs_cli",
    "lockstep_cli.fabric_cli",
    "lockstep_cli.fleet_cli",
    "lockstep_cli.gate_cli",
    "lockstep_cli.node_cli",
    "lockstep_cli.pool_cli",
    "lockstep_cli.rollout_cli",
    "lockstep_cli.topology_cli",
    "lockstep_sim.cli",
}


def modules_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    """Every module loaded once ``code`` ran in a fresh process (from the repository root)."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    ).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def loaded(modules: set[str], names: set[str]) -> set[str]:
    """The ``names`` (packages or modules) among ``modules``, a package counting its parts."""
    return {n for n in names if any(m == n or m.startswith(n + ".") for m in modules)}


def test_help_lists_every_group_without_loading_one() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['lockstep', '--help']\n"
        "from lockstep_cli.main import app\n"
        "try:\n"
        "    app()\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
    )
    assert loaded(modules_after(code), GROUP_MODULES | set(HEAVY)) == set()


def test_fleet_admit_quick_path_loads_no_async_nats_rich_or_settings_code() -> None:
    # A fake NATS server in this process answers: the answer is printed without rich.
    code = (
        "import os, sys\n"
        "from tests.unit.cli.fake_nats import fake_nats\n"
        'answer = (b\'{"specversion":"1.0","type":"lockstep.admission.check.answered",\'\n'
        '    b\'"schemaversion":1,"data":{"stack_hash":"\' + b\'a\' * 64 + '
        'b\'","nodes":[{"node_id":"n1","admitted":true,"reasons":[]}]}}\')\n'
        "with fake_nats(lambda _: (None, answer)) as (url, seen):\n"
        "    os.environ['LOCKSTEP_NATS_URL'] = url\n"
        "    sys.argv = ['lockstep', 'fleet', 'admit', '--stack-hash', 'a' * 64, '--nodes', 'n1']\n"
        "    from lockstep_cli.main import app\n"
        "    try:\n"
        "        app()\n"
        "    except SystemExit as exit:\n"
        "        assert exit.code == 0, exit.code\n"
        "    assert len(seen.requests) == 1\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    modules = modules_after(code, env)
    assert "lockstep_cli.admit_quick" in modules and "lockstep_cli.fleet_cli" in modules
    assert loaded(modules, NOT_FOR_ADMIT) == set()


def walk(command: Command, ctx: Context, path: list[str]) -> Iterator[list[str]]:
    yield path
    if isinstance(command, TyperGroup):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, name
            yield from walk(sub, Context(sub, info_name=name, parent=ctx), [*path, name])


def test_every_command_has_a_help_listing_its_options_and_subcommands() -> None:
    root = typer.main.get_command(app)
    runner = CliRunner()
    paths = list(walk(root, Context(root, info_name="lockstep"), []))
    assert len(paths) > 50  # every group was loaded to be walked
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, (path, result.output)
        ctx = Context(root, info_name="lockstep")
        command: Command = root
        for name in path:
            sub = command.get_command(ctx, name) if isinstance(command, TyperGroup) else None
            assert sub is not None
            command, ctx = sub, Context(sub, info_name=name, parent=ctx)
        for param in command.params:
            for flag in (o for o in param.opts if o.startswith("--")):
                assert flag in result.output, (path, flag)
        if isinstance(command, TyperGroup):
            for name in command.list_commands(ctx):
                assert name in result.output, (path, name)


def test_the_top_level_help_gives_each_group_its_own_help() -> None:
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    ctx = Context(root, info_name="lockstep")
    for name, entry in GROUPS.items():
        group = root.get_command(ctx, name)
        # A command's help is its docstring, wrapped where the source wraps it.
        assert group is not None and " ".join((group.help or "").split()) == entry.help, name
    listing = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    for name, entry in GROUPS.items():
        assert re.search(rf"{name}\s+{re.escape(entry.help[:40])}", listing), name


def test_a_misspelt_group_is_suggested() -> None:
    result = CliRunner().invoke(app, ["flet"])
    assert result.exit_code == 2 and "Did you mean 'fleet'?" in result.output


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("lockstep 0.")


def test_a_group_whose_package_is_not_installed_is_one_line_naming_it() -> None:
    # lockstep_bench is its own workspace member: an installation of the CLI alone lacks it.
    class Group(LazyGroup):
        lazy: ClassVar[dict[str, Lazy]] = {
            "bench": Lazy("lockstep_absent_bench.cli", "bench_app", "Benchmarks.")
        }

    partial = typer.Typer(cls=Group)

    @partial.callback()
    def top() -> None:
        """Top."""

    result = CliRunner().invoke(partial, ["bench", "--help"])
    assert result.exit_code == 1
    assert "`lockstep bench` needs the lockstep_absent_bench package" in result.output
    assert "Traceback" not in result.output


def test_the_demo_and_the_benches_are_reached_by_name_only() -> None:
    # What `lockstep demo` and `lockstep bench` load lives in lockstep_bench, which the CLI
    # never imports (pyproject.toml's contract): here, that the names still lead to them.
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    ctx = Context(root, info_name="lockstep")
    demo = root.get_command(ctx, "demo")
    bench = root.get_command(ctx, "bench")
    assert demo is not None and not isinstance(demo, TyperGroup)
    assert [p.name for p in demo.params] == ["data_dir", "screenshots", "console_listen"]
    assert isinstance(bench, TyperGroup) and "startup" in bench.list_commands(ctx)
