"""Headless Chromium for the browser tests and bench/: one launch, with the fallback for machines whose GPU process dies at start."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: where Chromium's GPU process dies at start ("GPU process isn't usable. Goodbye."), this runs it in one process
FALLBACK_ARGS = ["--no-zygote", "--single-process"]


def launch(playwright: Any) -> Any:
    """A headless Chromium; relaunched with :data:`FALLBACK_ARGS` when the first launch fails."""
    try:
        return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    except Exception:  # the GPU process died, or the zygote could not start: the one-process mode works there
        return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS + FALLBACK_ARGS)


def chromium() -> Iterator[Any]:
    """Body of a ``browser`` fixture: skipped without Chromium or Playwright, failing in CI (.ci/run installs both)."""
    import pytest  # (here: bench/ imports this module for the launch alone)

    skip = pytest.fail if os.environ.get("CI") else pytest.skip
    if not CHROMIUM.exists():
        skip("headless browser tests need /usr/bin/chromium (apt-get install chromium, or run .ci/browser)")
    try:
        import playwright.sync_api as sync_api
    except ImportError:
        skip("headless browser tests need Playwright: pip install -e '.[browser]'")
    with sync_api.sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()
