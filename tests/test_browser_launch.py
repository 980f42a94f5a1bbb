"""The browser tests' launch falls back to one-process Chromium where its GPU process dies at start."""

from __future__ import annotations

from typing import Any

from browser import CHROMIUM_ARGS, FALLBACK_ARGS, launch


class _Chromium:
    def __init__(self, failures: int) -> None:
        self.calls: list[list[str]] = []
        self.failures = failures

    def launch(self, *, executable_path: str, args: list[str]) -> Any:
        self.calls.append(args)
        if len(self.calls) <= self.failures:
            raise RuntimeError("Browser.launch: GPU process isn't usable. Goodbye.")
        return "browser"


class _Playwright:
    def __init__(self, failures: int) -> None:
        self.chromium = _Chromium(failures)


def test_a_gpu_process_that_dies_is_retried_in_one_process() -> None:
    p = _Playwright(failures=1)
    assert launch(p) == "browser"
    assert p.chromium.calls == [CHROMIUM_ARGS, CHROMIUM_ARGS + FALLBACK_ARGS]
    assert FALLBACK_ARGS == ["--no-zygote", "--single-process"]


def test_a_browser_that_starts_is_launched_once() -> None:
    p = _Playwright(failures=0)
    assert launch(p) == "browser" and p.chromium.calls == [CHROMIUM_ARGS]
