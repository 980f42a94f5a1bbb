"""Fake GitHub REST and GitLab v4 APIs on 127.0.0.1: they record every request and refuse what the real ones would.

:class:`FakeGitHub` serves a pull request's comments (list, create, update),
a workflow's runs, a run's artifacts and an artifact's zip, which it answers
with a 302 to :class:`BlobStore`, a server on another port (another origin),
as GitHub answers with a signed storage URL. :class:`FakeGitLab` serves a
merge request's notes (list, create, update), the project's jobs and their
artifacts. Both check the token, the query parameters and the JSON bodies'
shapes (a body that is not exactly ``{"body": str}`` is a 422/400), and can be
told to refuse writes with 403 (a fork's read-only token).
"""

from __future__ import annotations

import io
import itertools
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aio_server import ThreadedAioServer
from aiohttp import web


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


def zip_folder(folder: Path, prefix: str = "") -> bytes:
    """``folder``'s files in a zip, under ``prefix`` (as actions/upload-artifact zips a folder: its content at the root)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, prefix + path.relative_to(folder).as_posix())
    return buffer.getvalue()


class BlobStore(ThreadedAioServer):
    """Signed downloads on another origin: ``GET /blob/{key}?sig=...``; records the headers each request carried."""

    thread_name = "fake-blob-store"

    def __init__(self) -> None:
        super().__init__()
        self.blobs: dict[str, bytes] = {}
        self.requests: list[Request] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/blob/{key}", self.get)

    async def get(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(Request("GET", request.path, dict(request.query), dict(request.headers), None))
        blob = self.blobs.get(request.match_info["key"])
        if blob is None or request.query.get("sig") != "signed":
            return web.Response(status=403, text="<Error>AuthenticationFailed</Error>")
        return web.Response(body=blob, content_type="application/zip")


def _body_only(data: Any) -> bool:
    return isinstance(data, dict) and set(data) == {"body"} and isinstance(data["body"], str)


class _Recording(ThreadedAioServer):
    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token
        self.requests: list[Request] = []
        self.read_only = False

    async def record(self, request: web.Request) -> Request:
        body: Any = None
        raw = await request.read()
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        entry = Request(request.method, request.path, dict(request.query), dict(request.headers), body)
        self.requests.append(entry)
        return entry

    def calls(self, method: str | None = None) -> list[Request]:
        return [r for r in self.requests if method is None or r.method == method]


class FakeGitHub(_Recording):
    """``owner/repo``'s REST API: pull request comments, workflow runs, artifacts."""

    thread_name = "fake-github"

    def __init__(self, token: str, store: BlobStore, repository: str = "acme/bot") -> None:
        super().__init__(token)
        self.store, self.repository = store, repository
        self.comments: dict[int, list[dict[str, Any]]] = {}
        #: workflow runs, newest first, as GitHub lists them
        self.runs: list[dict[str, Any]] = []
        self.artifacts: dict[int, list[dict[str, Any]]] = {}
        self._ids = itertools.count(1000)
        #: the token's user: None is GITHUB_TOKEN (comments as github-actions[bot], /user refused), else a person's PAT
        self.login: str | None = None

    def routes(self, app: web.Application) -> None:
        repo = "/repos/{owner}/{repo}"
        app.router.add_get(repo + "/issues/{number}/comments", self.list_comments)
        app.router.add_post(repo + "/issues/{number}/comments", self.create_comment)
        app.router.add_patch(repo + "/issues/comments/{id}", self.update_comment)
        app.router.add_get(repo + "/actions/workflows/{workflow}/runs", self.list_runs)
        app.router.add_get(repo + "/actions/runs", self.list_runs)
        app.router.add_get(repo + "/actions/runs/{run_id}/artifacts", self.list_artifacts)
        app.router.add_get(repo + "/actions/artifacts/{id}/zip", self.download)
        app.router.add_get("/user", self.user)
        app.router.add_route("*", "/{tail:.*}", self.unknown)

    # -- what a test sets up

    def add_run(self, run_id: int, *, branch: str, conclusion: str = "success", event: str = "push", workflow: str = "evals.yml") -> None:
        self.runs.insert(
            0,
            {
                "id": run_id,
                "head_branch": branch,
                "event": event,
                "status": "completed",
                "conclusion": conclusion,
                "path": f".github/workflows/{workflow}",
                "head_repository": {"full_name": self.repository},
            },
        )

    def add_artifact(self, run_id: int, name: str, zipped: bytes, *, expired: bool = False) -> int:
        artifact_id = next(self._ids)
        self.store.blobs[str(artifact_id)] = zipped
        self.artifacts.setdefault(run_id, []).append(
            {
                "id": artifact_id,
                "name": name,
                "expired": expired,
                "size_in_bytes": len(zipped),
                "archive_download_url": f"{self.url}/repos/{self.repository}/actions/artifacts/{artifact_id}/zip",
            }
        )
        return artifact_id

    # -- checks every endpoint makes

    async def _checked(self, request: web.Request) -> tuple[Request, web.Response | None]:
        entry = await self.record(request)
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return entry, web.json_response({"message": "Bad credentials"}, status=401)
        if f"{request.match_info.get('owner')}/{request.match_info.get('repo')}" != self.repository:
            return entry, web.json_response({"message": "Not Found"}, status=404)
        return entry, None

    @staticmethod
    def _page(query: dict[str, str]) -> tuple[int, int] | None:
        try:
            per_page, page = int(query.get("per_page", "30")), int(query.get("page", "1"))
        except ValueError:
            return None
        return (per_page, page) if 1 <= per_page <= 100 and page >= 1 else None

    async def list_comments(self, request: web.Request) -> web.Response:
        entry, refused = await self._checked(request)
        if refused:
            return refused
        paging = self._page(entry.query)
        if paging is None:
            return web.json_response({"message": "Invalid paging"}, status=422)
        per_page, page = paging
        comments = self.comments.get(int(request.match_info["number"]), [])
        return web.json_response(comments[(page - 1) * per_page : page * per_page])

    async def create_comment(self, request: web.Request) -> web.Response:
        entry, refused = await self._checked(request)
        if refused:
            return refused
        if self.read_only:
            return web.json_response({"message": "Resource not accessible by integration"}, status=403)
        if not _body_only(entry.body):
            return web.json_response({"message": "Invalid request: body is required"}, status=422)
        number = int(request.match_info["number"])
        comment = {
            "id": next(self._ids),
            "body": entry.body["body"],
            "user": {"login": self.login, "type": "User"} if self.login else {"login": "github-actions[bot]", "type": "Bot"},
            "html_url": f"https://github.example/{self.repository}/pull/{number}#issuecomment-1",
        }
        self.comments.setdefault(number, []).append(comment)
        return web.json_response(comment, status=201)

    async def user(self, request: web.Request) -> web.Response:
        await self.record(request)
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response({"message": "Bad credentials"}, status=401)
        if self.login is None:  # as GitHub answers an installation token
            return web.json_response({"message": "Resource not accessible by integration"}, status=403)
        return web.json_response({"login": self.login, "type": "User"})

    async def update_comment(self, request: web.Request) -> web.Response:
        entry, refused = await self._checked(request)
        if refused:
            return refused
        if self.read_only:
            return web.json_response({"message": "Resource not accessible by integration"}, status=403)
        if not _body_only(entry.body):
            return web.json_response({"message": "Invalid request: body is required"}, status=422)
        for comments in self.comments.values():
            for comment in comments:
                if comment["id"] == int(request.match_info["id"]):
                    comment["body"] = entry.body["body"]
                    return web.json_response(comment)
        return web.json_response({"message": "Not Found"}, status=404)

    async def list_runs(self, request: web.Request) -> web.Response:
        entry, refused = await self._checked(request)
        if refused:
            return refused
        q = entry.query
        if self._page(q) is None or q.get("status") not in (None, "success", "completed"):
            return web.json_response({"message": "Invalid query"}, status=422)
        runs = [
            r
            for r in self.runs
            if (not q.get("branch") or r["head_branch"] == q["branch"])
            and (q.get("status") != "success" or r["conclusion"] == "success")
            and ("workflow" not in request.match_info or r["path"].endswith("/" + request.match_info["workflow"]))
        ]
        per_page = int(q.get("per_page", "30"))
        return web.json_response({"total_count": len(runs), "workflow_runs": runs[:per_page]})

    async def list_artifacts(self, request: web.Request) -> web.Response:
        entry, refused = await self._checked(request)
        if refused:
            return refused
        if self._page(entry.query) is None:
            return web.json_response({"message": "Invalid query"}, status=422)
        found = [a for a in self.artifacts.get(int(request.match_info["run_id"]), []) if entry.query.get("name") in (None, a["name"])]
        return web.json_response({"total_count": len(found), "artifacts": found})

    async def download(self, request: web.Request) -> web.Response:
        _, refused = await self._checked(request)
        if refused:
            return refused
        key = request.match_info["id"]
        if key not in self.store.blobs:
            return web.json_response({"message": "Not Found"}, status=404)
        raise web.HTTPFound(f"{self.store.url}/blob/{key}?sig=signed")

    async def unknown(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.json_response({"message": "Not Found"}, status=404)


@dataclass
class GitLabJobRecord:
    id: int
    name: str
    ref: str
    zipped: bytes | None
    status: str = "success"
    tag: bool = False


class FakeGitLab(_Recording):
    """Project ``project_id``'s v4 API: merge request notes, jobs and their artifacts."""

    thread_name = "fake-gitlab"

    def __init__(self, token: str, job_token: str = "job-token-1", project_id: str = "42") -> None:
        super().__init__(token)
        self.job_token, self.project_id = job_token, project_id
        self.notes: dict[int, list[dict[str, Any]]] = {}
        #: jobs, newest first
        self.jobs: list[GitLabJobRecord] = []
        self._ids = itertools.count(500)
        #: the token's user: a project access token's bot, or a person's token when ``bot`` is False
        self.username, self.bot = "project_42_bot", True

    def routes(self, app: web.Application) -> None:
        base = "/api/v4/projects/{project}"
        app.router.add_get(base + "/merge_requests/{iid}/notes", self.list_notes)
        app.router.add_post(base + "/merge_requests/{iid}/notes", self.create_note)
        app.router.add_put(base + "/merge_requests/{iid}/notes/{id}", self.update_note)
        app.router.add_get(base + "/jobs", self.list_jobs)
        app.router.add_get(base + "/jobs/{job_id}/artifacts", self.job_artifacts)
        app.router.add_get(base + "/jobs/artifacts/{ref}/download", self.ref_artifacts)
        app.router.add_get("/api/v4/user", self.user)
        app.router.add_route("*", "/{tail:.*}", self.unknown)

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/v4"

    def add_job(self, name: str, ref: str, zipped: bytes | None, *, status: str = "success") -> int:
        job = GitLabJobRecord(next(self._ids), name, ref, zipped, status)
        self.jobs.insert(0, job)
        return job.id

    async def _checked(self, request: web.Request, *, job_token_ok: bool = False) -> tuple[Request, web.Response | None]:
        entry = await self.record(request)
        private = request.headers.get("PRIVATE-TOKEN")
        job = request.headers.get("JOB-TOKEN")
        if not (private == self.token or (job_token_ok and job == self.job_token)):
            return entry, web.json_response({"message": "401 Unauthorized"}, status=401)
        if request.match_info.get("project") != self.project_id:
            return entry, web.json_response({"message": "404 Project Not Found"}, status=404)
        return entry, None

    async def list_notes(self, request: web.Request) -> web.Response:
        entry, refused = await self._checked(request)
        if refused:
            return refused
        try:
            per_page, page = int(entry.query.get("per_page", "20")), int(entry.query.get("page", "1"))
        except ValueError:
            return web.json_response({"error": "page is invalid"}, status=400)
        if not (1 <= per_page <= 100 and page >= 1) or entry.query.get("sort", "desc") not in ("asc", "desc"):
            return web.json_response({"error": "invalid paging"}, status=400)
        notes = self.notes.get(int(request.match_info["iid"]), [])
        ordered = notes if entry.query.get("sort") == "asc" else list(reversed(notes))
        return web.json_response(ordered[(page - 1) * per_page : page * per_page])

    async def create_note(self, request: web.Request) -> web.Response:
        entry, refused = await self._checked(request)
        if refused:
            return refused
        if self.read_only:
            return web.json_response({"message": "403 Forbidden"}, status=403)
        if not _body_only(entry.body):
            return web.json_response({"error": "body is missing"}, status=400)
        author = {"username": self.username, "bot": self.bot}
        note = {"id": next(self._ids), "body": entry.body["body"], "system": False, "author": author}
        self.notes.setdefault(int(request.match_info["iid"]), []).append(note)
        return web.json_response(note, status=201)

    async def user(self, request: web.Request) -> web.Response:
        await self.record(request)
        if request.headers.get("PRIVATE-TOKEN") != self.token:
            return web.json_response({"message": "401 Unauthorized"}, status=401)
        return web.json_response({"username": self.username, "bot": self.bot})

    async def update_note(self, request: web.Request) -> web.Response:
        entry, refused = await self._checked(request)
        if refused:
            return refused
        if self.read_only:
            return web.json_response({"message": "403 Forbidden"}, status=403)
        if not _body_only(entry.body):
            return web.json_response({"error": "body is missing"}, status=400)
        for note in self.notes.get(int(request.match_info["iid"]), []):
            if note["id"] == int(request.match_info["id"]):
                note["body"] = entry.body["body"]
                return web.json_response(note)
        return web.json_response({"message": "404 Not found"}, status=404)

    async def list_jobs(self, request: web.Request) -> web.Response:
        entry, refused = await self._checked(request)
        if refused:
            return refused
        scopes = request.query.getall("scope[]", [])
        page, per_page = int(entry.query.get("page", "1")), int(entry.query.get("per_page", "20"))
        jobs = [j for j in self.jobs if not scopes or j.status in scopes]
        shown = [
            {
                "id": j.id,
                "name": j.name,
                "ref": j.ref,
                "status": j.status,
                "tag": j.tag,
                "artifacts_file": {"filename": "artifacts.zip", "size": len(j.zipped)} if j.zipped else None,
            }
            for j in jobs[(page - 1) * per_page : page * per_page]
        ]
        return web.json_response(shown)

    async def job_artifacts(self, request: web.Request) -> web.Response:
        _, refused = await self._checked(request, job_token_ok=True)
        if refused:
            return refused
        job = next((j for j in self.jobs if j.id == int(request.match_info["job_id"])), None)
        if job is None or job.zipped is None:
            return web.json_response({"message": "404 Not found"}, status=404)
        return web.Response(body=job.zipped, content_type="application/zip")

    async def ref_artifacts(self, request: web.Request) -> web.Response:
        entry, refused = await self._checked(request, job_token_ok=True)
        if refused:
            return refused
        name = entry.query.get("job")
        for job in self.jobs:
            if job.ref == request.match_info["ref"] and job.name == name and job.status == "success" and job.zipped:
                return web.Response(body=job.zipped, content_type="application/zip")
        return web.json_response({"message": "404 Not found"}, status=404)

    async def unknown(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.json_response({"message": "404 Not found"}, status=404)
