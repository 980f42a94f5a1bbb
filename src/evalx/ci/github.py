"""GitHub: a pull request's comments, and the baseline run from the base branch's last successful workflow run.

What a GitHub Actions job's environment says (:class:`GitHubJob`):
``GITHUB_API_URL``, ``GITHUB_REPOSITORY``, ``GITHUB_EVENT_PATH`` (the event:
the pull request's number, whether its head is a fork), ``GITHUB_TOKEN``
(the action passes its ``github-token`` input so), ``GITHUB_WORKFLOW_REF``
(which workflow file runs), ``GITHUB_RUN_ID``.

Endpoints (REST, ``Accept: application/vnd.github+json``):

- ``GET /repos/{repo}/issues/{n}/comments?per_page=100&page=P``,
  ``POST /repos/{repo}/issues/{n}/comments``,
  ``PATCH /repos/{repo}/issues/comments/{id}``: a pull request's
  conversation is its issue's;
- ``GET /repos/{repo}/actions/workflows/{file}/runs?branch=B&status=success``
  (``/actions/runs`` when the workflow is not known), then
  ``GET /repos/{repo}/actions/runs/{id}/artifacts?name=N`` and
  ``GET /repos/{repo}/actions/artifacts/{id}/zip``: a redirect to the
  artifact's storage, followed without the token.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from evalx.ci.forge import ForgeClient
from evalx.ci.sticky import Comment
from evalx.common.json_types import JSON, JSONObject, as_array, as_object
from evalx.common.reading import CI_EVENT, read_json
from evalx.errors import ForgeError, UnreadableFile

__all__ = ["GitHubJob", "GitHubThread", "find_baseline_artifact"]

log = logging.getLogger(__name__)

#: pages of comments read at most (100 a page)
MAX_PAGES = 50
#: base-branch workflow runs looked at for an artifact, newest first
MAX_RUNS = 20


@dataclass(frozen=True)
class GitHubJob:
    """A GitHub Actions job, as its environment describes it."""

    api_url: str
    repository: str
    token: str | None
    event_name: str
    pull_request: int | None
    #: the pull request's head is another repository (a fork): its token is read-only
    fork: bool
    base_ref: str | None
    default_branch: str | None
    workflow_file: str | None
    run_id: str | None
    server_url: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GitHubJob:
        env = os.environ if env is None else env
        event = _event(env.get("GITHUB_EVENT_PATH"))
        pr = as_object(event.get("pull_request"))
        number = pr.get("number")
        head_repo, base_repo = as_object(as_object(pr.get("head")).get("repo")), as_object(as_object(pr.get("base")).get("repo"))
        fork = bool(pr) and (
            head_repo.get("fork") is True or (bool(head_repo.get("full_name")) and head_repo.get("full_name") != base_repo.get("full_name"))
        )
        workflow_ref = env.get("GITHUB_WORKFLOW_REF") or ""  # owner/repo/.github/workflows/evals.yml@refs/heads/main
        workflow_path = workflow_ref.partition("@")[0]
        repository = env.get("GITHUB_REPOSITORY") or ""
        if repository and workflow_path.startswith(repository + "/"):
            workflow_path = workflow_path[len(repository) + 1 :]
        return cls(
            api_url=(env.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/"),
            repository=repository,
            token=env.get("GITHUB_TOKEN") or env.get("GH_TOKEN") or None,
            event_name=env.get("GITHUB_EVENT_NAME") or "",
            pull_request=number if isinstance(number, int) and not isinstance(number, bool) else None,
            fork=fork,
            base_ref=env.get("GITHUB_BASE_REF") or None,
            default_branch=str(as_object(event.get("repository")).get("default_branch") or "") or None,
            workflow_file=workflow_path.rsplit("/", 1)[-1] or None if workflow_path.startswith(".github/workflows/") else None,
            run_id=env.get("GITHUB_RUN_ID") or None,
            server_url=(env.get("GITHUB_SERVER_URL") or "https://github.com").rstrip("/"),
        )

    def client(self) -> ForgeClient:
        if not self.token:
            raise ForgeError("GitHub: no token (set GITHUB_TOKEN)")
        if not self.repository or "/" not in self.repository:
            raise ForgeError("GitHub: GITHUB_REPOSITORY is not set (owner/name)")
        return ForgeClient(
            "GitHub",
            self.api_url,
            {"Authorization": f"Bearer {self.token}", "X-GitHub-Api-Version": "2022-11-28"},
        )

    def run_url(self) -> str | None:
        """This workflow run's page (its artifacts are listed there)."""
        if not (self.repository and self.run_id):
            return None
        return f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}"

    def repo_path(self) -> str:
        return "/repos/" + "/".join(urllib.parse.quote(part, safe="") for part in self.repository.split("/", 1))


def _event(path: str | None) -> JSONObject:
    """The event payload at ``GITHUB_EVENT_PATH`` (``{}`` when unset or unreadable: then no pull request is known)."""
    if not path:
        return {}
    try:  # a regular file only, within its size: a FIFO or /dev/zero there never hangs the job
        data = read_json(path, CI_EVENT)
    except UnreadableFile as exc:
        log.warning("cannot read the GitHub event: %s", exc)
        return {}
    except (OSError, ValueError) as exc:
        log.warning("cannot read the GitHub event at %s: %s", path, exc)
        return {}
    return as_object(data)


class GitHubThread:
    """The comments of pull request ``number`` (its issue's comments)."""

    def __init__(self, api: ForgeClient, job: GitHubJob, number: int) -> None:
        self.api, self.job, self.number = api, job, number
        self.name = f"pull request #{number}"

    async def comments(self) -> AsyncIterator[Comment]:
        for page in range(1, MAX_PAGES + 1):
            url = self.api.url(f"{self.job.repo_path()}/issues/{self.number}/comments", per_page=100, page=page)
            _, answer = await self.api.call("GET", url)
            items = as_array(answer)
            for item in items:
                c = as_object(item)
                cid, body = c.get("id"), c.get("body")
                if isinstance(cid, int) and isinstance(body, str):
                    user = as_object(c.get("user"))
                    login = user.get("login")
                    yield Comment(cid, body, user.get("type") == "Bot", login if isinstance(login, str) else None)
            if len(items) < 100:
                return

    async def me(self) -> str | None:
        try:
            _, answer = await self.api.call("GET", self.api.url("/user"))
        except ForgeError:  # GITHUB_TOKEN may not read /user (403): its comments are a bot's
            return None
        login = as_object(answer).get("login")
        return login if isinstance(login, str) else None

    async def create(self, body: str) -> str | None:
        url = self.api.url(f"{self.job.repo_path()}/issues/{self.number}/comments")
        _, answer = await self.api.call("POST", url, {"body": body}, ok=(201,))
        return _html_url(answer)

    async def update(self, comment_id: int, body: str) -> str | None:
        url = self.api.url(f"{self.job.repo_path()}/issues/comments/{comment_id}")
        _, answer = await self.api.call("PATCH", url, {"body": body})
        return _html_url(answer)


def _html_url(answer: JSON) -> str | None:
    url = as_object(answer).get("html_url")
    return url if isinstance(url, str) else None


async def find_baseline_artifact(api: ForgeClient, job: GitHubJob, branch: str, artifact: str, zip_path: Path) -> str | None:
    """Download the newest ``artifact`` of ``branch``'s successful runs of this workflow to ``zip_path``; the run's id, or None.

    Runs of a pull request (``head_branch`` can name any branch of a fork)
    and of another repository are never a baseline; nor is this run.
    """
    repo = job.repo_path()
    query: dict[str, str | int] = {"branch": branch, "status": "success", "per_page": MAX_RUNS, "exclude_pull_requests": "true"}
    if job.workflow_file:
        runs_url = api.url(f"{repo}/actions/workflows/{urllib.parse.quote(job.workflow_file, safe='')}/runs", **query)
    else:
        runs_url = api.url(f"{repo}/actions/runs", **query)
    _, answer = await api.call("GET", runs_url)
    for item in as_array(as_object(answer).get("workflow_runs")):
        run = as_object(item)
        run_id = run.get("id")
        if not isinstance(run_id, int) or str(run_id) == job.run_id:
            continue
        if str(run.get("event") or "").startswith("pull_request") or run.get("head_branch") != branch:
            continue
        head = as_object(run.get("head_repository")).get("full_name")
        if head is not None and head != job.repository:
            continue
        _, listed = await api.call("GET", api.url(f"{repo}/actions/runs/{run_id}/artifacts", name=artifact, per_page=100))
        for entry in as_array(as_object(listed).get("artifacts")):
            a = as_object(entry)
            artifact_id = a.get("id")
            if a.get("name") != artifact or a.get("expired") is True or not isinstance(artifact_id, int):
                continue
            if await api.download(api.url(f"{repo}/actions/artifacts/{artifact_id}/zip"), zip_path):
                return str(run_id)
    return None
