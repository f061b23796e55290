"""The README screenshots' tool refuses, in one line, what would make a wrong picture: no
browser, a rollout id that is not a token, no console at the address or a page it does not
serve. (It taking the pages of a real demo run is checked by the demo's end-to-end test.)"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer
from typer.testing import CliRunner

from lockstep_cli.main import app as cli_app
from lockstep_common.subjects import token
from lockstep_console import screenshots
from lockstep_console.screenshots import ScreenshotError, take
from lockstep_console.server import create_app
from lockstep_devstack.process import free_port
from tests.unit.console import scenes

pytestmark = pytest.mark.unit


@pytest.fixture
async def console() -> AsyncIterator[str]:
    server = TestServer(create_app(scenes.source()))
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


def test_without_a_browser_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda _: None)
    with pytest.raises(ScreenshotError, match="install Debian's chromium"):
        screenshots.browser()


@pytest.mark.parametrize("rollout", ["r.*", "../etc", "r 1"])
def test_a_rollout_id_that_is_not_a_token_is_refused(rollout: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rollout id"):
        token(rollout, "rollout id")  # the same check take makes first
    with pytest.raises(ValueError, match="rollout id"):
        take("http://127.0.0.1:1", rollout, tmp_path)
    assert list(tmp_path.iterdir()) == []


async def test_no_console_or_a_missing_page_is_one_line_and_no_file(
    console: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(screenshots, "browser", lambda: "/nonexistent/chromium")
    nobody = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ScreenshotError, match=f"no console at {nobody}/rollouts/"):
        await _take(nobody, scenes.TRIPPED, tmp_path)
    with pytest.raises(ScreenshotError, match=r"the console answered 404 for .*/rollouts/r-gone"):
        await _take(console, "r-gone", tmp_path)
    with pytest.raises(ScreenshotError, match="not a console URL"):
        await _take("file:///etc", scenes.TRIPPED, tmp_path)
    assert await asyncio.to_thread(lambda: list(tmp_path.iterdir())) == []


async def _take(url: str, rollout: str, out: Path) -> list[Path]:
    return await asyncio.to_thread(take, url, rollout, out)


def test_demo_screenshots_without_a_browser_stops_before_the_demo(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(shutil, "which", lambda _: None)
    result = CliRunner().invoke(
        cli_app, ["demo", "--screenshots", str(tmp_path / "img")], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 2, result.output
    assert "--screenshots: screenshots need a headless Chromium" in result.output
    assert "Lockstep demo" not in result.output and not (tmp_path / "img").exists()


def test_demo_screenshots_without_its_console_is_refused(tmp_path: Path) -> None:
    argv = ["demo", "--screenshots", str(tmp_path / "img"), "--console", "off"]
    result = CliRunner().invoke(cli_app, argv, env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert "--screenshots needs the console: not with --console off" in result.output
    assert not (tmp_path / "img").exists()
