"""The console's three pages as PNGs, for the README (``docs/img/console-*.png``): a rollout, its
gate and the fleet, taken of a running console by headless Chromium (Debian's ``chromium``).

``lockstep demo --screenshots DIR`` calls ``take`` on its own console once the bad image's
rollout has halted, so the README shows a real run's pages; the demo's end-to-end test does the
same into a scratch folder, which keeps them regenerable. Chromium's own ``--screenshot`` is
used (no driver, nothing run in the page but the page's script), one browser per page, at once:
each is mostly browser start-up, which the three then share in time.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from lockstep_common.subjects import token

BROWSERS = ("chromium", "chromium-browser")
WINDOW = "1280,1000"
PNG = b"\x89PNG\r\n\x1a\n"
# (file, page, window): the gate page is taken taller, so that below a hard rule's offending
# nodes, timeline and tables its metrics as of the trip (canary against control) show too.
PAGES = (
    ("console-rollout.png", "/rollouts/{rollout}", WINDOW),
    ("console-gate.png", "/rollouts/{rollout}/gate", "1280,2800"),
    ("console-fleet.png", "/fleet", WINDOW),
)


class ScreenshotError(Exception):
    """No browser, or a page it could not take; the message is one line."""


def browser() -> str:
    """The headless browser to use."""
    found = next((p for name in BROWSERS if (p := shutil.which(name))), None)
    if found is None:
        raise ScreenshotError(
            "screenshots need a headless Chromium: install Debian's chromium (none on PATH)"
        )
    return found


def take(base_url: str, rollout: str, out: Path, *, timeout_s: float = 120.0) -> list[Path]:
    """Write the three pages of the console at ``base_url`` (``http://`` or ``https://``) for
    ``rollout`` into ``out`` (made if missing); returns the files in ``PAGES`` order."""
    if not base_url.startswith(("http://", "https://")):
        raise ScreenshotError(f"not a console URL: {base_url!r}")
    token(rollout, "rollout id")  # never a path or a query of its own making
    binary = browser()
    for _, path, _ in PAGES:
        # Chromium draws its own page for a refused connection or an error, and exits 0: ask
        # first, so that a console not serving (or another one on the port) is said so.
        _answers(base_url.rstrip("/") + path.format(rollout=rollout))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lockstep-shots-") as scratch:
        running = []
        for i, (name, path, window) in enumerate(PAGES):
            target = out / name
            target.unlink(missing_ok=True)  # a stale file never passes for a new one
            url = base_url.rstrip("/") + path.format(rollout=rollout)
            argv = [
                binary,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--no-first-run",
                "--disable-extensions",
                f"--user-data-dir={scratch}/{i}",  # browsers running at once share no profile
                f"--window-size={window}",
                f"--screenshot={target}",
                url,
            ]
            proc = subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
            running.append((url, target, proc))
        for url, target, proc in running:
            try:
                _, err = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                for _, _, p in running:
                    p.kill()
                raise ScreenshotError(f"chromium took over {timeout_s:g} s on {url}") from None
            if proc.returncode != 0 or not _is_png(target):
                last = (err.strip().splitlines() or ["no message"])[-1][:200]
                raise ScreenshotError(f"chromium made no screenshot of {url}: {last}")
    return [target for _, target, _ in running]


def _answers(url: str) -> None:
    """The page is served (200), or one line saying why not."""
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:  # noqa: S310 - http(s) only
            reply.read()
    except urllib.error.HTTPError as exc:
        raise ScreenshotError(f"the console answered {exc.code} for {url}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ScreenshotError(f"no console at {url}: {exc}") from None


def _is_png(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(PNG)) == PNG
    except OSError:
        return False
