"""The CI examples in examples/ci/: valid YAML, and every evalx command they run is a valid evalx invocation."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from evalx.cli import main

CI = Path(__file__).resolve().parents[2] / "examples" / "ci"
#: a GitHub Actions expression, ``${{ ... }}``
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def github_commands(workflow: dict[str, Any], values: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(job id, command) for each line of each ``run:`` step that calls evalx, expressions replaced by ``values``."""
    for job_id, job in workflow["jobs"].items():
        for step in job["steps"]:
            for line in str(step.get("run") or "").replace("\\\n", " ").splitlines():
                if line.strip().startswith("evalx "):
                    yield job_id, EXPRESSION.sub(lambda m: values[m.group(1)], line)


def gitlab_commands(pipeline: dict[str, Any]) -> Iterator[tuple[str, str]]:
    variables = {k: str(v) for job in pipeline.values() if isinstance(job, dict) for k, v in (job.get("variables") or {}).items()}
    for job_id, job in pipeline.items():
        if not isinstance(job, dict):
            continue
        for line in [*(job.get("before_script") or []), *(job.get("script") or [])]:
            if str(line).strip().startswith("evalx "):
                yield job_id, re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], str(line))


def check_invocation(command: str) -> click.Context:
    """Parse ``command`` as evalx's own command line does (options, choices, callbacks); fail on anything it refuses."""
    args = shlex.split(command)
    assert args[0] == "evalx"
    sub = main.commands.get(args[1])
    assert sub is not None, f"{command}: no evalx command {args[1]!r}"
    try:
        return sub.make_context(args[1], args[2:])
    except click.UsageError as exc:  # an unknown option, a bad choice
        pytest.fail(f"{command}: {exc.format_message()}")
    except SystemExit as exc:  # an option's own check (--shard I/N) refused it
        pytest.fail(f"{command}: refused (exit {exc.code})")


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((CI / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_github_sharded_workflow() -> None:
    workflow = load("github-sharded.yml")
    shards = workflow["jobs"]["shard"]["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1))
    commands = []
    for shard in shards:
        values = {
            "matrix.shard": str(shard),
            "strategy.job-total": str(len(shards)),
            "github.run_id": "1",
        }
        commands += list(github_commands(workflow, values))
    runs = [c for job, c in commands if job == "shard"]
    assert {check_invocation(c).params["shard"] for c in runs} == {(i, len(shards)) for i in shards}
    merges = sorted({c for job, c in commands if job == "merge"})
    assert len(merges) == 1
    ctx = check_invocation(merges[0])
    assert ctx.info_name == "merge" and ctx.params["run_dirs"] and ctx.params["junit"] is not None
    # the merge job waits for the shards, runs when one failed, and downloads what they upload
    merge = workflow["jobs"]["merge"]
    assert merge["needs"] == "shard" and "cancelled()" in merge["if"]
    upload = next(s for s in workflow["jobs"]["shard"]["steps"] if "upload-artifact" in str(s.get("uses")))
    download = next(s for s in merge["steps"] if "download-artifact" in str(s.get("uses")))
    assert upload["with"]["name"].startswith(download["with"]["pattern"].rstrip("*"))
    assert upload["with"]["path"] == "runs/"
    assert ctx.params["run_dirs"] == (f"{download['with']['path']}/*/*/",)  # shards/<artifact>/<run_id>/


def test_github_quick_workflow() -> None:
    workflow = load("github-actions.yml")
    commands = list(
        github_commands(workflow, {"github.run_id": "1", "vars.ENGINE_URL": "", "secrets.ENGINE_KEY": "", "secrets.OPENAI_API_KEY": ""})
    )
    assert commands
    for _, command in commands:
        check_invocation(command)


def test_gitlab_pipeline() -> None:
    commands = list(gitlab_commands(load("gitlab-ci.yml")))
    assert commands
    for _, command in commands:
        check_invocation(command)


def test_a_bad_invocation_is_caught() -> None:
    with pytest.raises(pytest.fail.Exception, match="--shard 5/4"):
        check_invocation("evalx run --shard 5/4 --quiet")
    with pytest.raises(pytest.fail.Exception, match="No such option"):
        check_invocation("evalx merge shards/*/*/ --gate")
