"""The GitLab template (ci/gitlab/evalx.gitlab-ci.yml): its job's script run here, as a runner would, against a fake GitLab API.

The default branch's job keeps its run as an artifact; a merge request's
job restores it as the baseline, runs evalx and posts one note, which the
next push updates. The job's exit status is evalx's; junit.xml is the
merge request's test report.
"""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ci_project import base_env, make_project, set_answers
from forge_servers import FakeGitLab, zip_folder

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "ci" / "gitlab" / "evalx.gitlab-ci.yml"
TOKEN = "glpat-secretsecret123456"
MARKER = "<!-- evalx-comment -->"

pytestmark = pytest.mark.slow


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    api = FakeGitLab(TOKEN).start()
    try:
        yield api
    finally:
        api.stop()


def template() -> dict[str, Any]:
    data = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


class Pipelines:
    def __init__(self, tmp: Path, api: FakeGitLab) -> None:
        self.tmp, self.api = tmp, api
        self.ids = itertools.count(1)

    def job(
        self, *, mr: int | None, wrong: dict[str, str] | None = None, token: str | None = TOKEN, **variables: str
    ) -> tuple[subprocess.CompletedProcess[str], Path]:
        n = next(self.ids)
        work = self.tmp / f"job-{n}"
        make_project(work)
        set_answers(work, **(wrong or {}))
        spec = template()
        job = spec[".evalx"]
        env = {
            **base_env(work),
            **{k: str(v) for k, v in job["variables"].items()},
            **variables,
            "CI": "true",
            "GITLAB_CI": "true",
            "CI_API_V4_URL": self.api.api_url,
            "CI_PROJECT_ID": self.api.project_id,
            "CI_JOB_NAME": "evalx",
            "CI_JOB_TOKEN": self.api.job_token,
            "CI_JOB_URL": f"https://gitlab.example/acme/bot/-/jobs/{n}",
            "CI_DEFAULT_BRANCH": "main",
        }
        if token:
            env["EVALX_GITLAB_TOKEN"] = token
        if mr is None:
            env["CI_COMMIT_BRANCH"] = "main"
        else:
            env |= {"CI_MERGE_REQUEST_IID": str(mr), "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main"}
        # the script as the runner runs it: its entries in one shell, errexit and pipefail on (before_script installs: skipped)
        script = "\n".join(str(line) for line in job["script"])
        proc = subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        # the artifacts the job keeps (paths and the JUnit report), uploaded as GitLab would, when the job ran on main
        paths = [p.replace("$EVALX_RUNS_DIR", env["EVALX_RUNS_DIR"]) for p in job["artifacts"]["paths"]]
        assert job["artifacts"]["when"] == "always" and job["artifacts"]["reports"]["junit"] == "junit.xml" in paths
        assert (work / "junit.xml").is_file()
        if mr is None:
            runs = work / paths[0].rstrip("/")
            self.api.add_job(
                "evalx", "main", zip_folder(runs, prefix=paths[0].rstrip("/") + "/"), status="failed" if proc.returncode else "success"
            )
        return proc, work


def test_a_merge_request_gets_one_note_updated_on_the_next_push(tmp_path: Path, gitlab: FakeGitLab) -> None:
    pipelines = Pipelines(tmp_path, gitlab)
    main, _ = pipelines.job(mr=None)
    assert main.returncode == 0, main.stderr
    assert "no baseline yet" in main.stderr
    assert not gitlab.calls("POST")

    mr, _ = pipelines.job(mr=3, wrong={"three": "0"})
    assert mr.returncode == 1, mr.stderr  # the job's status is evalx's
    jobs = [r for r in gitlab.requests if r.path.endswith("/jobs")]
    assert jobs and jobs[0].query.get("scope[]") == "success"
    (note,) = gitlab.notes[3]
    assert note["body"].startswith(MARKER) and "Newly failing (1)" in note["body"] and "qa/three" in note["body"]
    assert "gitlab.example/acme/bot/-/jobs/2/artifacts/browse" in note["body"]
    assert TOKEN not in mr.stdout + mr.stderr

    again, _ = pipelines.job(mr=3)
    assert again.returncode == 0, again.stderr
    assert len(gitlab.notes[3]) == 1 and len(gitlab.calls("POST")) == 1 and len(gitlab.calls("PUT")) == 1
    assert "Newly failing" not in gitlab.notes[3][0]["body"]
    for request in gitlab.requests:
        assert request.headers.get("PRIVATE-TOKEN") == TOKEN
        if request.method in ("POST", "PUT"):
            assert set(request.body) == {"body"}


def test_without_an_access_token_the_note_is_printed_and_the_job_token_fetches_the_baseline(tmp_path: Path, gitlab: FakeGitLab) -> None:
    pipelines = Pipelines(tmp_path, gitlab)
    pipelines.job(mr=None)
    mr, _ = pipelines.job(mr=4, token=None, wrong={"one": "x"})
    assert mr.returncode == 1
    assert "no EVALX_GITLAB_TOKEN" in mr.stderr and MARKER in mr.stdout and "Newly failing (1)" in mr.stdout
    assert not gitlab.calls("POST")
    by_ref = [r for r in gitlab.requests if "/jobs/artifacts/main/download" in r.path]
    assert by_ref and by_ref[0].headers.get("JOB-TOKEN") == gitlab.job_token and by_ref[0].query == {"job": "evalx"}


def test_comment_off(tmp_path: Path, gitlab: FakeGitLab) -> None:
    mr, _ = Pipelines(tmp_path, gitlab).job(mr=5, EVALX_COMMENT="off", EVALX_ARGS="--case t*")
    assert mr.returncode == 0, mr.stderr
    assert "2 cells" in mr.stdout
    assert not gitlab.calls("POST") and not gitlab.notes
