"""The composite action (action.yml) run step by step here, as a runner would, against a fake GitHub API.

A push to main uploads its run; a pull request restores it as the baseline
(an artifact's zip, behind a redirect to another origin that gets no
token), runs evalx with it, comments once; the next push updates that
comment; a fork's pull request gets the job summary only. The job's exit
status is evalx's.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ci_project import base_env, make_project, set_answers
from forge_servers import BlobStore, FakeGitHub, zip_folder
from local_actions import JobRun, pull_request_event, run_action, write_event

REPO = Path(__file__).resolve().parents[2]
ACTION = REPO / "action.yml"
TOKEN = "ghs_token1234567890abcdef"
MARKER = "<!-- evalx-comment -->"

pytestmark = pytest.mark.slow


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    store = BlobStore().start()
    api = FakeGitHub(TOKEN, store).start()
    try:
        yield api
    finally:
        api.stop()
        store.stop()


class Jobs:
    """Runs of the evals workflow: each one a fresh checkout of the project, its run numbered."""

    def __init__(self, tmp: Path, api: FakeGitHub) -> None:
        self.tmp, self.api = tmp, api
        self.ids = itertools.count(100)

    def run(self, *, event_name: str, event: dict[str, Any], wrong: dict[str, str] | None = None, **inputs: str) -> tuple[JobRun, Path]:
        run_id = next(self.ids)
        job = self.tmp / f"job-{run_id}"
        make_project(job / "work")
        set_answers(job / "work", **(wrong or {}))
        temp = job / "runner-temp"
        temp.mkdir()
        summary = job / "step-summary.md"
        summary.write_text("")
        event_path = write_event(job / "event.json", event)
        env = {
            **base_env(job),
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_API_URL": self.api.url,
            "GITHUB_SERVER_URL": "https://github.example",
            "GITHUB_REPOSITORY": self.api.repository,
            "GITHUB_EVENT_NAME": event_name,
            "GITHUB_EVENT_PATH": str(event_path),
            "GITHUB_RUN_ID": str(run_id),
            "GITHUB_WORKFLOW_REF": f"{self.api.repository}/.github/workflows/evals.yml@refs/heads/main",
            "GITHUB_WORKSPACE": str(job / "work"),
            "GITHUB_STEP_SUMMARY": str(summary),
            "RUNNER_TEMP": str(temp),
        }
        if event_name == "pull_request":
            env["GITHUB_BASE_REF"] = event["pull_request"]["base"]["ref"]
        context = {
            "event_name": event_name,
            "event": event,
            "base_ref": env.get("GITHUB_BASE_REF", ""),
            "token": TOKEN,
            "run_id": str(run_id),
        }

        def upload(with_: dict[str, str], _env: dict[str, str]) -> dict[str, str]:  # actions/upload-artifact, into the fake
            artifact = self.api.add_artifact(run_id, with_["name"], zip_folder(Path(with_["path"])))
            return {
                "artifact-id": str(artifact),
                "artifact-url": f"https://github.example/acme/bot/actions/runs/{run_id}/artifacts/{artifact}",
            }

        result = run_action(
            ACTION,
            inputs=inputs,
            env=env,
            github=context,
            workdir=job / "work",
            stubs={"actions/upload-artifact": upload},
            skip=("install",),  # evalx is this checkout's; the install step has its own test
        )
        branch = "main" if event_name == "push" else "feature"
        self.api.add_run(run_id, branch=branch, event=event_name, conclusion="failure" if result.failed else "success")
        return result, summary


def push_event() -> dict[str, Any]:
    return {"ref": "refs/heads/main", "repository": {"full_name": "acme/bot", "default_branch": "main"}}


def test_a_pull_request_gets_one_comment_updated_on_the_next_push(tmp_path: Path, github: FakeGitHub) -> None:
    jobs = Jobs(tmp_path, github)

    # main: no baseline yet (a note, not a failure); the run is uploaded; nothing to comment on
    main, _ = jobs.run(event_name="push", event=push_event())
    assert not main.failed, main.log
    assert main.step("baseline").ran and main.outputs["baseline-dir"] == ""
    assert "no baseline yet" in main.step("baseline").output
    assert main.step("upload").ran and main.outputs["exit-code"] == "0"
    assert not github.calls("POST") and not github.calls("PATCH")

    # a pull request that breaks case `two`: the baseline comes from main's artifact, the comment names the regression
    pr, summary = jobs.run(event_name="pull_request", event=pull_request_event(7), wrong={"two": "5"})
    assert pr.failed and pr.outputs["exit-code"] == "1", pr.log
    assert pr.step("verdict").exit_code == 1  # the job's status is evalx's
    assert pr.outputs["baseline-dir"].endswith("evalx-baseline")
    download = [r for r in github.requests if r.path.endswith("/zip")]
    assert download and download[0].headers.get("Authorization") == f"Bearer {TOKEN}"
    assert github.store.requests, "the artifact is fetched from the storage origin the API redirects to"
    assert all("Authorization" not in r.headers for r in github.store.requests), "the token never goes to another origin"
    (comment,) = github.comments[7]
    body = comment["body"]
    assert body.startswith(MARKER)
    assert "Newly failing (1)" in body and "qa/two" in body
    assert "/actions/runs/101/artifacts/" in body  # the link to the uploaded run
    text = summary.read_text()
    assert "Newly failing (1)" in text and "qa/two" in text  # the job summary names the failure too
    annotation = next(line for line in pr.step("run").output.splitlines() if line.startswith("::error "))
    assert "file=qa.jsonl,line=2," in annotation and "qa/two" in annotation
    assert TOKEN not in pr.log

    # the next push fixes it: the same comment is updated, no second one
    again, _ = jobs.run(event_name="pull_request", event=pull_request_event(7))
    assert not again.failed, again.log
    assert len(github.comments[7]) == 1
    assert len(github.calls("POST")) == 1 and len(github.calls("PATCH")) == 1
    updated = github.comments[7][0]["body"]
    assert updated.startswith(MARKER) and "Newly failing" not in updated
    assert "vs. baseline" in updated  # still against main's run
    posts = [r for r in github.requests if r.method in ("POST", "PATCH")]
    assert all(set(r.body) == {"body"} for r in posts)


def test_a_fork_pull_request_gets_the_job_summary_only(tmp_path: Path, github: FakeGitHub) -> None:
    jobs = Jobs(tmp_path, github)
    jobs.run(event_name="push", event=push_event())
    fork, summary = jobs.run(event_name="pull_request", event=pull_request_event(8, fork=True), wrong={"one": "9"})
    assert fork.outputs["exit-code"] == "1" and fork.failed
    assert not github.calls("POST") and not github.calls("PATCH")
    text = summary.read_text()
    assert "qa/one" in text and "comes from a fork" in text


def test_a_token_that_may_not_write_is_a_note_not_a_failure(tmp_path: Path, github: FakeGitHub) -> None:
    jobs = Jobs(tmp_path, github)
    github.read_only = True  # a fork not flagged as one: the POST answers 403
    pr, summary = jobs.run(event_name="pull_request", event=pull_request_event(9))
    assert not pr.failed, pr.log
    assert len(github.calls("POST")) == 1 and not github.comments.get(9)
    assert "may not write" in summary.read_text()


def test_comment_off_and_extra_arguments_and_env(tmp_path: Path, github: FakeGitHub) -> None:
    jobs = Jobs(tmp_path, github)
    pr, _ = jobs.run(
        event_name="pull_request",
        event=pull_request_event(10),
        comment="off",
        args="--case one --case t*",
        env="EXTRA_SETTING=on\n\n# a comment line\nANOTHER=x=y\n",
    )
    assert not pr.failed, pr.log
    assert not pr.step("comment").ran
    assert not github.calls("POST")
    assert "3 cells" in pr.step("run").output  # one, two, three: the glob was evalx's, not the shell's
    bad, _ = jobs.run(event_name="pull_request", event=pull_request_event(10), env="not a setting")
    assert bad.failed and bad.step("run").exit_code == 2 and "NAME=VALUE" in bad.step("run").output


def test_the_install_step_installs_evalx_runner_never_evalx(tmp_path: Path) -> None:
    """The install step's script, with a python3 that records what pip is asked to install."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    log = tmp_path / "pip.log"
    (fake_bin / "python3").write_text(
        "#!/bin/bash\n"
        'if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python";'
        ' printf \'#!/bin/bash\\necho "evalx 0.0.0"\\n\' > "$3/bin/evalx"; chmod +x "$3/bin/evalx"; exit 0; fi\n'
        f'echo "$@" >> {log}\n'
    )
    (fake_bin / "python3").chmod(0o755)
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "HOME": str(tmp_path), "RUNNER_TEMP": str(temp)}
    for inputs, wanted in (({}, "evalx-runner==0.1.0"), ({"evalx-path": "./vendor/evalx"}, "./vendor/evalx")):
        log.write_text("")
        result = run_action(
            ACTION,
            inputs=inputs,
            env=env,
            github={"event_name": "push", "event": {}},
            workdir=tmp_path,
            skip=("baseline", "run"),
        )
        install = result.step("install")
        assert install.exit_code == 0, install.output
        assert log.read_text().split()[-1] == wanted
        assert "pip install" in log.read_text() and " evalx " not in f" {log.read_text()} "
