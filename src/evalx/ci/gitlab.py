"""GitLab: a merge request's notes, and the baseline run from the target branch's last successful pipeline.

What a GitLab CI job's environment says (:class:`GitLabJob`):
``CI_API_V4_URL``, ``CI_PROJECT_ID``, ``CI_MERGE_REQUEST_IID``,
``CI_MERGE_REQUEST_TARGET_BRANCH_NAME``, ``CI_DEFAULT_BRANCH``,
``CI_JOB_NAME``, ``CI_JOB_URL``. The token that writes notes is a project
or group access token in ``EVALX_GITLAB_TOKEN`` (sent as ``PRIVATE-TOKEN``):
``CI_JOB_TOKEN`` cannot write notes. It can download artifacts (sent as
``JOB-TOKEN``), which the baseline falls back to.

Endpoints (REST v4):

- ``GET /projects/:id/merge_requests/:iid/notes?per_page=100&page=P&sort=asc``,
  ``POST /projects/:id/merge_requests/:iid/notes``,
  ``PUT /projects/:id/merge_requests/:iid/notes/:note_id``;
- ``GET /projects/:id/jobs?scope[]=success`` (newest first) and
  ``GET /projects/:id/jobs/:job_id/artifacts``: the newest successful job of
  that name on the branch, its artifacts as a zip; with the job token only,
  ``GET /projects/:id/jobs/artifacts/:ref/download?job=NAME`` (the job in
  the ref's latest successful pipeline).
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from evalx.ci.forge import ForgeClient
from evalx.ci.sticky import Comment
from evalx.common.json_types import as_array, as_object
from evalx.errors import ForgeError

__all__ = ["TOKEN_VARIABLE", "GitLabJob", "GitLabThread", "find_baseline_artifact"]

#: the CI variable that holds the token evalx writes notes with
TOKEN_VARIABLE = "EVALX_GITLAB_TOKEN"
#: pages of notes read at most (100 a page)
MAX_PAGES = 50
#: pages of the project's successful jobs looked through for the baseline (100 a page)
MAX_JOB_PAGES = 5


@dataclass(frozen=True)
class GitLabJob:
    """A GitLab CI job, as its environment describes it."""

    api_url: str
    project: str
    token: str | None
    job_token: str | None
    merge_request: int | None
    target_branch: str | None
    default_branch: str | None
    job_name: str | None
    job_url: str | None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GitLabJob:
        env = os.environ if env is None else env
        iid = env.get("CI_MERGE_REQUEST_IID") or ""
        return cls(
            api_url=(env.get("CI_API_V4_URL") or "").rstrip("/"),
            project=env.get("CI_PROJECT_ID") or "",
            token=env.get(TOKEN_VARIABLE) or None,
            job_token=env.get("CI_JOB_TOKEN") or None,
            merge_request=int(iid) if iid.isdigit() else None,
            target_branch=env.get("CI_MERGE_REQUEST_TARGET_BRANCH_NAME") or None,
            default_branch=env.get("CI_DEFAULT_BRANCH") or None,
            job_name=env.get("CI_JOB_NAME") or None,
            job_url=env.get("CI_JOB_URL") or None,
        )

    def client(self, *, download: bool = False) -> ForgeClient:
        """A client with the access token (or, to ``download`` artifacts, the job token when there is no access token)."""
        if not self.api_url or not self.project:
            raise ForgeError("GitLab: CI_API_V4_URL and CI_PROJECT_ID are not set (not in a GitLab CI job?)")
        if self.token:
            return ForgeClient("GitLab", self.api_url, {"PRIVATE-TOKEN": self.token})
        if download and self.job_token:
            return ForgeClient("GitLab", self.api_url, {"JOB-TOKEN": self.job_token})
        raise ForgeError(f"GitLab: no token (set the CI variable {TOKEN_VARIABLE}: CI_JOB_TOKEN cannot write notes)")

    def artifacts_url(self) -> str | None:
        """This job's artifacts page."""
        return f"{self.job_url}/artifacts/browse" if self.job_url else None

    def project_path(self) -> str:
        return f"/projects/{urllib.parse.quote(self.project, safe='')}"


class GitLabThread:
    """The notes of merge request ``iid`` (system notes left out)."""

    def __init__(self, api: ForgeClient, job: GitLabJob, iid: int) -> None:
        self.api, self.job, self.iid = api, job, iid
        self.name = f"merge request !{iid}"

    def _notes(self) -> str:
        return f"{self.job.project_path()}/merge_requests/{self.iid}/notes"

    async def comments(self) -> AsyncIterator[Comment]:
        for page in range(1, MAX_PAGES + 1):
            url = self.api.url(self._notes(), per_page=100, page=page, sort="asc", order_by="created_at")
            _, answer = await self.api.call("GET", url)
            items = as_array(answer)
            for item in items:
                note = as_object(item)
                nid, body = note.get("id"), note.get("body")
                if isinstance(nid, int) and isinstance(body, str) and note.get("system") is not True:
                    author = as_object(note.get("author"))
                    name = author.get("username")
                    yield Comment(nid, body, author.get("bot") is True, name if isinstance(name, str) else None)
            if len(items) < 100:
                return

    async def me(self) -> str | None:
        try:
            _, answer = await self.api.call("GET", self.api.url("/user"))
        except ForgeError:
            return None
        name = as_object(answer).get("username")
        return name if isinstance(name, str) else None

    async def create(self, body: str) -> str | None:
        await self.api.call("POST", self.api.url(self._notes()), {"body": body}, ok=(201,))
        return None

    async def update(self, comment_id: int, body: str) -> str | None:
        await self.api.call("PUT", self.api.url(f"{self._notes()}/{comment_id}"), {"body": body})
        return None


async def find_baseline_artifact(api: ForgeClient, job: GitLabJob, ref: str, job_name: str, zip_path: Path) -> bool:
    """Download the artifacts of the newest successful job ``job_name`` on branch ``ref`` to ``zip_path``; False when there is none.

    With an access token the project's successful jobs are listed (newest
    first, :data:`MAX_JOB_PAGES` pages), so a scheduled pipeline that lacks
    the job does not hide the last one that ran it. With the job token
    alone, GitLab's by-ref download is used: the ref's latest successful
    pipeline must hold the job.
    """
    if "PRIVATE-TOKEN" in api.auth:
        for page in range(1, MAX_JOB_PAGES + 1):
            query: dict[str, str | int] = {"scope[]": "success", "per_page": 100, "page": page}
            _, answer = await api.call("GET", api.url(f"{job.project_path()}/jobs", **query))
            items = as_array(answer)
            for item in items:
                entry = as_object(item)
                job_id = entry.get("id")
                if entry.get("name") != job_name or entry.get("ref") != ref or entry.get("tag") is True or not isinstance(job_id, int):
                    continue
                if not entry.get("artifacts_file"):
                    continue
                if await api.download(api.url(f"{job.project_path()}/jobs/{job_id}/artifacts"), zip_path):
                    return True
            if len(items) < 100:
                break
        return False
    path = f"{job.project_path()}/jobs/artifacts/{urllib.parse.quote(ref, safe='')}/download"
    return await api.download(api.url(path, job=job_name), zip_path)
