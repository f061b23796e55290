"""One service shape (issue 28 item 5): the five services are built alike, so that a change
learned in one carries over to the next. Each holds:

- ``router.subscriptions(handlers)``: its one parameter, the service's ``handlers.Handlers``;
- every public method of ``Handlers`` is a ``lockstep_common.stores.Handler``: ``(tx, env, *,
  now)`` on the service's unit of work, never the consumer runtime's context or a clock;
- no worker module imports the handlers (the shared layers contract makes them siblings);
- each service's own layers contract orders the modules of the shared one as it does.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import tomllib
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("inventory", "planner", "updater", "healthgate", "attest")
SHARED = "one service shape"
# Modules a handler must not reach: the runtime's context (a handler gets a unit of work) and
# the clock (a handler gets ``now``).
NOT_FOR_HANDLERS = ("lockstep_common.consumer", "lockstep_common.clock")


def _contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _shared() -> dict[str, Any]:
    (shared,) = [c for c in _contracts() if c["name"].startswith(SHARED)]
    return shared


def _modules(layer: str) -> list[str]:
    """The module names of one layer (``a | (b)`` or ``a : b``), without their package."""
    parts = layer.replace(":", "|").split("|")
    return [p.strip().strip("()").rsplit(".", 1)[-1] for p in parts]


def _imports(module: str) -> set[str]:
    """Every module ``module``'s source imports (names as written, absolute)."""
    source = inspect.getsource(importlib.import_module(module))
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


@pytest.mark.parametrize("service", SERVICES)
def test_subscriptions_take_the_services_handlers(service: str) -> None:
    router = importlib.import_module(f"lockstep_{service}.router")
    handlers = importlib.import_module(f"lockstep_{service}.handlers")
    params = list(inspect.signature(router.subscriptions, eval_str=True).parameters.values())
    assert [(p.name, p.annotation, p.default) for p in params] == [
        ("handlers", handlers.Handlers, inspect.Parameter.empty)
    ]


@pytest.mark.parametrize("service", SERVICES)
def test_every_handler_is_tx_env_and_keyword_now(service: str) -> None:
    handlers = importlib.import_module(f"lockstep_{service}.handlers")
    methods = inspect.getmembers(handlers.Handlers, inspect.iscoroutinefunction)
    public = [(name, m) for name, m in methods if not name.startswith("_")]
    assert public, "no handlers"
    for name, method in public:
        params = list(inspect.signature(method).parameters.values())[1:]  # after self
        kinds = [(p.name, p.kind) for p in params]
        assert len(kinds) == 3, f"{name}: {kinds}"
        assert kinds[0] == ("tx", inspect.Parameter.POSITIONAL_OR_KEYWORD), name
        assert kinds[1][0] in ("env", "envs"), name
        assert kinds[2] == ("now", inspect.Parameter.KEYWORD_ONLY), name


@pytest.mark.parametrize("service", SERVICES)
def test_handlers_see_neither_the_runtime_context_nor_a_clock(service: str) -> None:
    imported = _imports(f"lockstep_{service}.handlers")
    assert {m for m in imported for bad in NOT_FOR_HANDLERS if m.startswith(bad)} == set()


@pytest.mark.parametrize("service", SERVICES)
def test_no_worker_imports_the_handlers(service: str) -> None:
    # The shared contract's handlers layer: its siblings of the handlers are the workers.
    (layer,) = [layer for layer in _shared()["layers"] if "handlers" in _modules(layer)]
    package = importlib.import_module(f"lockstep_{service}")
    workers = [
        m
        for m in _modules(layer)
        if m != "handlers" and importlib.util.find_spec(f"{package.__name__}.{m}") is not None
    ]
    assert workers, "a service without a worker module"
    for worker in workers:
        handlers = f"{package.__name__}.handlers"
        imported = _imports(f"{package.__name__}.{worker}")
        assert {m for m in imported if m == handlers or m.startswith(f"{handlers}.")} == set()


def test_the_shared_contract_holds_all_five_services() -> None:
    assert sorted(_shared()["containers"]) == sorted(f"lockstep_{s}" for s in SERVICES)


@pytest.mark.parametrize("service", SERVICES)
def test_a_services_own_layers_keep_the_shared_order(service: str) -> None:
    # Where a service's contract names two modules of the shared one, the one the shared contract
    # puts higher is higher here too (issue 28: the inventory put its store above its adapters).
    shared_rank = {m: i for i, layer in enumerate(_shared()["layers"]) for m in _modules(layer)}
    (own,) = [
        c
        for c in _contracts()
        if c["type"] == "layers"
        and c["name"].startswith(f"{service} layers")
        and not c["name"].startswith(SHARED)
    ]
    rank = {m: i for i, layer in enumerate(own["layers"]) for m in _modules(layer)}
    placed = sorted((m for m in rank if m in shared_rank), key=lambda m: shared_rank[m])
    wrong = [
        (a, b)
        for a in placed
        for b in placed
        if shared_rank[a] < shared_rank[b] and not rank[a] < rank[b]
    ]
    assert wrong == [], f"{service}: not above as in the shared contract: {wrong}"
