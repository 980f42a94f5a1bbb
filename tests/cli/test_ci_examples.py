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


#: bash pieces of the scripts that are not evalx's arguments: a command substitution's start, an array of optional options
SHELL_ONLY = re.compile(r'^\w+=\$\(|\)$|"\$\{\w+\[@\]\}"\s*')
ACTION = Path(__file__).resolve().parents[2] / "action.yml"
TEMPLATE = Path(__file__).resolve().parents[2] / "ci" / "gitlab" / "evalx.gitlab-ci.yml"


def evalx_lines(script: str) -> Iterator[str]:
    """The evalx commands of a bash script (a continued line joined), without the shell around them."""
    for line in script.replace("\\\n", " ").splitlines():
        line = SHELL_ONLY.sub("", line.strip()).strip()
        line = line.split(" || ")[0].strip()
        if line.startswith("evalx "):
            yield line


def github_commands(workflow: dict[str, Any], values: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(job id, command) for each line of each ``run:`` step that calls evalx, expressions replaced by ``values``."""
    for job_id, job in workflow["jobs"].items():
        for step in job["steps"]:
            for line in evalx_lines(str(step.get("run") or "")):
                yield job_id, EXPRESSION.sub(lambda m: values[m.group(1)], line)


def gitlab_commands(pipeline: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for job_id, job in pipeline.items():
        if not isinstance(job, dict):
            continue
        for entry in [*(job.get("before_script") or []), *(job.get("script") or [])]:
            for line in evalx_lines(str(entry)):
                line = line.replace(" $EVALX_ARGS", "")  # the user's extra arguments, split by the shell
                yield job_id, re.sub(r'"?\$\{?(\w+)(?::-\$\w+)?\}?"?', "VALUE", line)


def check_invocation(command: str) -> click.Context:
    """Parse ``command`` as evalx's own command line does (options, choices, callbacks); fail on anything it refuses."""
    args = shlex.split(command)
    assert args[0] == "evalx"
    sub = main.commands.get(args[1])
    assert sub is not None, f"{command}: no evalx command {args[1]!r}"
    name, rest = args[1], args[2:]
    if isinstance(sub, click.Group):  # evalx ci fetch-baseline
        group, sub = sub, sub.commands.get(rest[0]) if rest else None
        assert sub is not None, f"{command}: no evalx {group.name} command"
        name, rest = rest[0], rest[1:]
    try:
        return sub.make_context(name, rest)
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
    merges = sorted({c for job, c in commands if job == "merge" and c.startswith("evalx merge")})
    assert len(merges) == 1
    ctx = check_invocation(merges[0])
    assert ctx.info_name == "merge" and ctx.params["run_dirs"] and ctx.params["junit"] is not None
    fetch = sorted({c for job, c in commands if job == "merge" and c.startswith("evalx ci")})
    assert len(fetch) == 1 and "--artifact evalx-merged" in fetch[0]
    # the merge job waits for the shards, runs when one failed, and downloads what they upload
    merge = workflow["jobs"]["merge"]
    assert merge["needs"] == "shard" and "cancelled()" in merge["if"]
    upload = next(s for s in workflow["jobs"]["shard"]["steps"] if "upload-artifact" in str(s.get("uses")))
    download = next(s for s in merge["steps"] if "download-artifact" in str(s.get("uses")))
    assert upload["with"]["name"].startswith(download["with"]["pattern"].rstrip("*"))
    assert upload["with"]["path"] == "runs/"
    assert ctx.params["run_dirs"] == (f"{download['with']['path']}/*/*/",)  # shards/<artifact>/<run_id>/
    # the merged run is kept under the name the next night's baseline is fetched by
    keep = next(s for s in merge["steps"] if "upload-artifact" in str(s.get("uses")))
    assert keep["with"]["name"] == "evalx-merged" and "steps.merge.outputs.run-dir" in keep["with"]["path"]


def test_the_action_runs_valid_evalx_commands() -> None:
    action = yaml.safe_load(ACTION.read_text(encoding="utf-8"))
    commands = [line for step in action["runs"]["steps"] for line in evalx_lines(str(step.get("run") or ""))]
    assert {c.split()[1] for c in commands} >= {"ci", "run", "comment"}
    for command in commands:
        check_invocation(re.sub(r'"\$(\w+)"', "VALUE", command).replace("$EVALX_ARGS", ""))


def test_gitlab_template() -> None:
    template = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    commands = list(gitlab_commands(template))
    assert {c.split()[1] for _, c in commands} >= {"ci", "run", "comment"}
    for _, command in commands:
        check_invocation(command)


def test_gitlab_pipeline() -> None:
    pipeline = load("gitlab-ci.yml")
    assert pipeline["include"] and pipeline["evals-nightly"]["extends"] == ".evalx"


def test_a_bad_invocation_is_caught() -> None:
    with pytest.raises(pytest.fail.Exception, match="--shard 5/4"):
        check_invocation("evalx run --shard 5/4 --quiet")
    with pytest.raises(pytest.fail.Exception, match="No such option"):
        check_invocation("evalx merge shards/*/*/ --gate")
