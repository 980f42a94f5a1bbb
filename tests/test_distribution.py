"""evalx's distribution is ``evalx-runner``: every install line in the docs and examples names it, never PyPI's unrelated ``evalx``.

The release check (``.ci/wheel-check``: sdist and wheel built, ``twine check``, the wheel installed in a fresh venv
running the default config) runs in ``.ci/run`` and in the release workflow.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from evalx.version import __version__

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[1]
DISTRIBUTION = "evalx-runner"
#: a requirement's distribution name, as pip reads the start of it
NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def documents() -> list[Path]:
    """Every file a user copies install lines from: the README, docs, examples, workflows, the starters, CI scripts."""
    found = [REPO / "README.md", REPO / "action.yml", *sorted((REPO / "docs").rglob("*.md"))]
    for folder in ("examples", ".github", ".ci", "ci", "src/evalx/config/starters"):
        found += sorted(
            p for p in (REPO / folder).rglob("*") if p.is_file() and p.suffix in {"", ".md", ".yml", ".yaml", ".sh", ".py", ".txt"}
        )
    return found


def install_lines(text: str) -> list[str]:
    """Each ``pip install ...`` command in ``text`` (a line may hold several, after ``&&``)."""
    return [m.group(0) for m in re.finditer(r"pip(?:3)? install[^\n&|;`#]*", text.replace("\\\n", " "))]


def requirements(line: str) -> list[str]:
    """The distribution names a ``pip install`` line asks for (not paths, URLs-only or options)."""
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    names = []
    skip_next = False
    for word in words[2:]:
        if skip_next:
            skip_next = False
            continue
        if word in ("-r", "-c", "--python", "-t", "--target", "-i", "--index-url", "--extra-index-url", "-f", "--find-links"):
            skip_next = True
            continue
        if word.startswith(("-", ".", "/", "~", "$")) or word.endswith(".whl"):
            continue
        match = NAME.match(word)
        if match:
            names.append(match.group(1).lower().replace("_", "-"))
    return names


def test_the_distribution_is_ours_and_the_command_and_package_stay_evalx() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION
    assert project["scripts"] == {"evalx": "evalx.cli:main"}
    build = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert build["packages"] == ["src/evalx"]


def test_no_document_installs_the_unrelated_evalx_package() -> None:
    offenders = []
    for path in documents():
        text = path.read_text(encoding="utf-8", errors="replace")
        for line in install_lines(text):
            if "evalx" in requirements(line):
                offenders.append(f"{path.relative_to(REPO)}: {line.strip()}")
    assert offenders == [], "`pip install evalx` installs an unrelated project:\n" + "\n".join(offenders)


def test_the_scanner_catches_the_bare_name() -> None:  # the test above would pass on nothing if this did not hold
    assert requirements("pip install evalx") == ["evalx"]
    assert requirements("pip install 'evalx[ray]'") == ["evalx"]
    assert requirements('pip install "evalx-runner==0.1.0"') == [DISTRIBUTION]
    assert requirements("pip install -e '.[test]'") == []


def test_every_ci_example_installs_the_pinned_distribution() -> None:
    lines = []
    for path in sorted((REPO / "examples" / "ci").glob("*.yml")):
        text = path.read_text(encoding="utf-8")
        found = install_lines(text)
        # evalx's action and GitLab template install it (tests/ci/test_ci_files.py): pinned by their tag
        uses_ours = re.findall(r"/evalx@v[\d.]+|/evalx/v[\d.]+/ci/gitlab/evalx\.gitlab-ci\.yml", text)
        assert found or uses_ours, f"{path.name}: no install step"
        assert all(f"v{__version__}" in use for use in uses_ours), f"{path.name}: {uses_ours} is not pinned to {__version__}"
        yaml.safe_load(path.read_text(encoding="utf-8"))  # still valid YAML
        lines += [(path.name, line) for line in found]
    for name, line in lines:
        assert requirements(line) == [DISTRIBUTION], f"{name}: {line}"
        # pinned to this version (a release bumps both), so a copied workflow gets what it was tested with
        assert f"{DISTRIBUTION}=={__version__}" in line or f"@v{__version__}" in line, f"{name}: {line} is not pinned to {__version__}"


def test_the_wheel_check_runs_in_ci_and_in_the_release_workflow() -> None:
    check = (REPO / ".ci" / "wheel-check").read_text(encoding="utf-8")
    for step in ("python -m build", "twine check", "-m venv", '/bin/evalx" run'):
        assert step in check, step
    assert "bash .ci/wheel-check" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
    release = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text(encoding="utf-8"))
    steps = [str(step.get("run") or "") for step in release["jobs"]["build"]["steps"]]
    assert any(".ci/wheel-check" in run for run in steps)


def test_the_readme_says_how_evalx_is_distributed() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"pip install {DISTRIBUTION}" in readme or f'pip install "{DISTRIBUTION}' in readme
    assert "unrelated" in readme.split("## ", 2)[1]  # the warning about PyPI's `evalx`, in the first section
