"""action.yml, the GitLab template and every workflow under examples/ci/ validate against the schemas GitHub's and GitLab's
editors use (check-jsonschema's bundled copies), and keep the rules the action depends on."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalx.version import __version__

REPO = Path(__file__).resolve().parents[2]
ACTION = REPO / "action.yml"
TEMPLATE = REPO / "ci" / "gitlab" / "evalx.gitlab-ci.yml"
EXAMPLES = REPO / "examples" / "ci"


def check_jsonschema(schema: str, *files: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "check-jsonschema"
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "check_jsonschema"]
    return subprocess.run([*command, "--builtin-schema", schema, *map(str, files)], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("schema", "files"),
    [
        ("vendor.github-actions", [ACTION]),
        ("vendor.github-workflows", sorted(EXAMPLES.glob("github*.yml"))),
        ("vendor.gitlab-ci", [TEMPLATE, *sorted(EXAMPLES.glob("gitlab*.yml"))]),
    ],
)
def test_files_validate_against_the_bundled_schemas(schema: str, files: list[Path]) -> None:
    assert files
    result = check_jsonschema(schema, *files)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_catches_a_broken_action(tmp_path: Path) -> None:
    broken = tmp_path / "action.yml"
    broken.write_text(ACTION.read_text().replace("using: composite", "using: compost"))
    assert check_jsonschema("vendor.github-actions", broken).returncode != 0


def test_the_action_scripts_take_no_expression_and_install_the_right_distribution() -> None:
    action = yaml.safe_load(ACTION.read_text())
    steps = action["runs"]["steps"]
    for step in steps:
        if "run" in step:
            # values reach scripts through env: an input or an event's text is never pasted into code
            assert "${{" not in step["run"], step["name"]
            assert step["shell"] == "bash"
    install = next(s for s in steps if s.get("id") == "install")
    code = "\n".join(line.split("#")[0] for line in install["run"].splitlines())  # the comments say what not to do
    assert "evalx-runner==" in code and not re.search(r"pip install[^\n]*\bevalx\b(?!-runner)", code)
    # the version the action installs by default is the one it ships with
    assert action["inputs"]["evalx-version"]["default"] == __version__
    template = yaml.safe_load(TEMPLATE.read_text())
    assert template[".evalx"]["variables"]["EVALX_VERSION"] == __version__


def test_the_examples_use_the_action_and_the_template_and_cache_nothing() -> None:
    quick = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())
    for job in quick["jobs"].values():
        uses = [str(s.get("uses", "")) for s in job["steps"]]
        assert any(u.endswith("/evalx@v" + __version__) for u in uses), uses
        assert not any("actions/cache" in u for u in uses)  # runs/ no longer grows from push to push
    assert quick["permissions"] == {"contents": "read", "actions": "read", "pull-requests": "write"}
    sharded = (EXAMPLES / "github-sharded.yml").read_text()
    assert "actions/cache" not in sharded and "evalx ci fetch-baseline" in sharded
    gitlab = yaml.safe_load((EXAMPLES / "gitlab-ci.yml").read_text())
    assert gitlab["include"][0]["remote"].endswith("/ci/gitlab/evalx.gitlab-ci.yml")
    assert gitlab["evals-nightly"]["extends"] == ".evalx" and "evalx" in gitlab
