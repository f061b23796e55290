"""The chaos world, started once per module on a loop of its own (``loop_thread``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockstep_cli.scratch import drop_namespace
from tests.conftest import Servers
from tests.integration.chaos.loop_thread import LoopThread
from tests.integration.chaos.world import World, started_world


@pytest.fixture(scope="module")
def world(
    servers: Servers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LoopThread, World]]:
    """The world, started once on its own loop for every test of the module."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    tmp: Path = tmp_path_factory.mktemp("chaos")
    with LoopThread() as loop:
        w = loop.run(started_world(servers.nats_url, servers.database_url, namespace, tmp))
        try:
            yield loop, w
        finally:
            loop.run(w.stop())
            loop.run(drop_namespace(servers.nats_url, servers.database_url, namespace))
