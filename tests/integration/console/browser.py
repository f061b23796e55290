"""The console served from a thread (its own event loop) and a headless Chromium driving it
(Debian's ``chromium`` and ``chromium-driver``, through selenium); skipped, saying why, where
they are not installed (``.ci/run`` installs them)."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from lockstep_console.nudges import Nudges
from lockstep_console.server import create_app
from lockstep_console.testing.memory_source import MemorySource

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = "chromedriver"


@dataclass
class Served:
    """A console serving ``source``; ``nudge`` delivers a bus event's subject to it."""

    source: MemorySource
    url: str
    loop: asyncio.AbstractEventLoop
    nudges: Nudges

    def nudge(self, subject: str) -> None:
        self.loop.call_soon_threadsafe(self.nudges.nudge, subject)


@contextmanager
def served(source: MemorySource, *, poll_s: float = 30.0) -> Iterator[Served]:
    """The console on a free loopback port until the block ends. ``poll_s`` is long: a page
    that updates in a test was woken by a nudge, not by the poll."""
    nudges = Nudges()
    ready = threading.Event()
    box: dict[str, object] = {}

    async def main() -> None:
        app = create_app(source, nudges=nudges, poll_s=poll_s)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        stop = asyncio.Event()
        box.update(loop=asyncio.get_running_loop(), stop=stop, port=runner.addresses[0][1])
        ready.set()
        await stop.wait()
        await runner.cleanup()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(30), "the console did not start"
    loop = box["loop"]
    assert isinstance(loop, asyncio.AbstractEventLoop)
    try:
        yield Served(source, f"http://127.0.0.1:{box['port']}", loop, nudges)
    finally:
        stop = box["stop"]
        assert isinstance(stop, asyncio.Event)
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)


def chromium() -> tuple[str, str]:
    browser = next((p for name in CHROMIUM if (p := shutil.which(name))), None)
    driver = shutil.which(DRIVER)
    if browser is None or driver is None:
        pytest.skip(
            "no headless browser: install Debian's chromium and chromium-driver "
            "(.ci/run installs them)"
        )
    return browser, driver


@contextmanager
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    chrome.set_page_load_timeout(60)
    try:
        yield chrome
    finally:
        chrome.quit()
