"""Shared fixtures: the JUnit schema, a copy of the default example project, headless Chromium."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Caches evalx keeps in the user's folders (compiled report templates) go to a folder of the session's."""
    if not os.environ.get("EVALX_TESTS_KEEP_CACHE"):
        import tempfile

        os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="evalx-test-cache-")


def junit_xsd_path() -> Path:
    """The xUnit junit-10.xsd: ../shared/conformance beside the repo, else the copy in tests/data."""
    override = os.environ.get("EVALX_JUNIT_XSD")
    for candidate in (
        Path(override) if override else None,
        REPO.parent / "shared/conformance/junit-10.xsd",
        REPO / "tests/data/junit-10.xsd",
    ):
        if candidate is not None and candidate.exists():
            return candidate
    raise FileNotFoundError("junit-10.xsd")


@pytest.fixture
def junit_schema():  # type: ignore[no-untyped-def]
    import xmlschema

    return xmlschema.XMLSchema(str(junit_xsd_path()))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium for a module's tests (tests/browser.py: skipped without it, failing in CI).

    Ask for it after the fixtures that run evalx: Playwright's loop owns the thread once it starts.
    """
    from browser import chromium

    yield from chromium()


@pytest.fixture
def example_project(tmp_path: Path) -> Path:
    """A copy of the repo's default config and examples, as a user would have it."""
    dst = tmp_path / "project"
    dst.mkdir()
    shutil.copy(REPO / "evalconfig.yaml", dst / "evalconfig.yaml")
    shutil.copytree(REPO / "examples", dst / "examples", ignore=shutil.ignore_patterns("__pycache__", "runs", ".evalx", ".venv", "models"))
    return dst


@pytest.fixture(scope="session")
def engine_server():  # type: ignore[no-untyped-def]
    """The scripted agent Engine (tests/engine_server.py) on 127.0.0.1, keyed with ENGINE_TEST_KEY."""
    from engine_server import EngineServer

    server = EngineServer(key=ENGINE_TEST_KEY).start()
    yield server
    server.stop()


#: the key the scripted engine expects; tests grep every output for it
ENGINE_TEST_KEY = "ek-test-5f1c9a7e3b2d4c68"


@pytest.fixture
def fresh_registry() -> Iterator[None]:
    """The test's plugins register into the assertion registry of that test only."""
    from evalx.assertions import plugins, registry

    registry.registered()
    saved, saved_entry_points = dict(registry._REGISTRY), plugins._entry_point_issues
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)
    registry._generation += 1  # never back to an old number: the schema cache must rebuild
    plugins._entry_point_issues = saved_entry_points
