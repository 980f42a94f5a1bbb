"""`evalx comment`, `--markdown -`, the step summary's failing cells with a baseline, the annotations, and the forge client's
care with the token, through the command line and real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from aio_server import ThreadedAioServer
from aiohttp import web
from ci_project import make_project, set_answers
from click.testing import CliRunner

from evalx.ci.baseline import extract_run
from evalx.ci.forge import ForgeClient
from evalx.cli import main
from evalx.errors import EvalxError, ForgeError
from evalx.reports.annotations import escape_data, escape_property
from evalx.reports.comment import MAX_COMMENT_CHARS, comment_markdown, size


def evalx(*args: str, env: dict[str, str] | None = None) -> Any:
    result = CliRunner().invoke(main, list(args), env=env)
    assert "Traceback" not in result.output, result.output
    return result


def two_runs(tmp_path: Path, **wrong: str) -> tuple[Path, Path, Path]:
    """A passing run, then one with ``wrong`` answers compared with it: (config, baseline, run)."""
    config = make_project(tmp_path / "p")
    evalx("run", "-c", str(config), "--quiet")
    (baseline,) = (config.parent / "runs").iterdir()
    set_answers(config.parent, **wrong)
    evalx("run", "-c", str(config), "--quiet", "--baseline", str(baseline))
    (run,) = (p for p in (config.parent / "runs").iterdir() if p != baseline)  # run ids of one second need not sort
    return config, baseline, run


def test_the_step_summary_lists_the_failures_with_a_baseline(tmp_path: Path) -> None:
    """Newly failing first, then still failing: "0 newly failing" alone names nothing (issue 36)."""
    config = make_project(tmp_path / "p")
    set_answers(config.parent, one="x")
    evalx("run", "-c", str(config), "--quiet")
    set_answers(config.parent, one="x", three="y")
    summary = tmp_path / "summary.md"
    evalx("run", "-c", str(config), "--quiet", "--baseline", "latest", env={"GITHUB_STEP_SUMMARY": str(summary)})
    text = summary.read_text()
    assert "1 newly failing" in text
    newly, still = text.index("**Newly failing (1)**"), text.index("**Still failing (1)**")
    assert newly < still
    assert "qa/three" in text[newly:still] and "qa/one" in text[still:]


def test_markdown_dash_prints_the_markdown_on_stdout(tmp_path: Path) -> None:
    config = make_project(tmp_path / "p")
    result = CliRunner().invoke(main, ["run", "-c", str(config), "--markdown", "-"])
    assert result.exit_code == 0
    assert result.stdout.startswith("## ✅ evalx run") and "Run " not in result.stdout.splitlines()[0]
    assert "3 pass" in result.stderr  # the terminal summary moved to stderr
    refused = evalx("run", "-c", str(config), "--markdown", "-", "--json")
    assert refused.exit_code == 2 and "give one of them" in refused.output


def test_comment_prints_the_markdown_with_the_changes(tmp_path: Path) -> None:
    config, baseline, run = two_runs(tmp_path, two="0")
    result = evalx("comment", str(run), "--artifact-url", "https://ci.example/artifacts/9")
    assert result.exit_code == 0
    text = result.output
    assert text.startswith("<!-- evalx-comment -->\n")
    assert "Newly failing (1)" in text and "qa/two" in text and "-33.3 pts" in text
    assert "(https://ci.example/artifacts/9)" in text
    # against another baseline given explicitly, and a run named by id; an id of its own in the marker
    again = evalx("comment", "-c", str(config), run.name, "--baseline", str(run), "--id", "nightly")
    assert again.output.startswith("<!-- evalx-comment:nightly -->") and "Newly failing" not in again.output
    assert "Still failing (1)" in again.output
    bad = evalx("comment", str(run), "--id", "no spaces")
    assert bad.exit_code == 2 and "--id" in bad.output
    fixed = evalx("comment", str(baseline))
    assert "Failing cells" not in fixed.output and "no baseline" in fixed.output


def test_comment_post_without_a_token_prints_it(tmp_path: Path) -> None:
    _, _, run = two_runs(tmp_path, two="0")
    result = evalx("comment", str(run), "--post", "github", env={"GITHUB_TOKEN": "", "GH_TOKEN": "", "GITHUB_EVENT_PATH": ""})
    assert result.exit_code == 0
    assert "no GITHUB_TOKEN" in result.stderr and result.stdout.startswith("<!-- evalx-comment -->")


def test_the_comment_stays_within_the_limit_and_says_what_it_left_out(tmp_path: Path) -> None:
    _, baseline, run = two_runs(tmp_path, one="a", two="b", three="c")
    summary = json.loads((run / "summary.json").read_text())
    # a run with thousands of failing cells of long reasons
    row = summary["failures"][0]
    summary["failures"] = [{**row, "case_id": f"case-{i}", "reason": "x" * 190} for i in range(5000)]
    summary["failures_total"] = 20000
    text = comment_markdown(summary, artifact_url="https://ci.example/a")
    assert size(text) <= MAX_COMMENT_CHARS
    assert "| … | 19950 more | |" in text and "Still failing (20000)" in text
    tight = comment_markdown(summary, artifact_url="https://ci.example/a", limit=2000)
    assert size(tight) <= 2000 and tight.startswith("<!-- evalx-comment -->")
    assert "| … | " in tight and tight.count("x" * 190) < 10  # fewer rows, the rest counted
    # emoji count twice, as GitHub counts them
    assert size("✅") == 1 and size("🧩") == 2


def test_annotations_escape_and_cap(tmp_path: Path) -> None:
    assert escape_data("50% a\r\nb:c,d") == "50%25 a%0D%0Ab:c,d"
    assert escape_property("evalx: a, b%") == "evalx%3A a%2C b%25"
    config = make_project(tmp_path / "p")
    lines = [json.dumps({"id": f"c{i}", "input": "one", "expected": "2", "assert": [{"type": "equals"}]}) for i in range(14)]
    (config.parent / "qa.jsonl").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(
        main, ["run", "-c", str(config), "--quiet"], env={"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(tmp_path)}
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("::error ")]
    assert len(errors) == 10  # GitHub shows 10 error annotations a step
    assert errors[0].startswith("::error file=p/qa.jsonl,line=1,title=evalx%3A bot qa/c0 failed::")
    assert errors[9].startswith("::error file=p/qa.jsonl,line=10,")
    assert "::notice title=evalx::4 more failing cells not annotated" in result.stderr
    assert not [line for line in result.stdout.splitlines() if line.startswith("::")]  # stdout stays the summary's
    quiet = CliRunner().invoke(main, ["run", "-c", str(config), "--quiet"], env={"GITHUB_ACTIONS": ""})
    assert "::error" not in quiet.output


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_a_baseline_zip_gives_only_the_run_files_and_nothing_outside(tmp_path: Path) -> None:
    archive = tmp_path / "a.zip"
    archive.write_bytes(
        _zip(
            {
                "runs/20260101-000000-aaaaaa/results.jsonl": b"old\n",
                "runs/20260102-000000-bbbbbb/results.jsonl": b"new\n",
                "runs/20260102-000000-bbbbbb/summary.json": b"{}",
                "runs/20260102-000000-bbbbbb/report.html": b"<html>",
                "../escape/results.jsonl": b"no",
                "runs/20260102-000000-bbbbbb/../../evil/summary.json": b"no",
            }
        )
    )
    run = extract_run(archive, tmp_path / "baseline")
    assert run == tmp_path / "baseline"
    assert sorted(p.name for p in run.iterdir()) == ["results.jsonl", "summary.json"]
    assert (run / "results.jsonl").read_bytes() == b"new\n"  # the newest run of the shallowest level
    assert not (tmp_path / "escape").exists() and not (tmp_path / "evil").exists()
    with pytest.raises(EvalxError, match="not empty"):
        extract_run(archive, tmp_path / "baseline")
    empty = tmp_path / "b.zip"
    empty.write_bytes(_zip({"junit.xml": b"<testsuites/>"}))
    assert extract_run(empty, tmp_path / "none") is None
    (tmp_path / "c.zip").write_bytes(b"not a zip")
    with pytest.raises(EvalxError, match="not a zip"):
        extract_run(tmp_path / "c.zip", tmp_path / "c")


class Echoing(ThreadedAioServer):
    """An API that quotes the request's token back in its errors, and redirects a download to another origin."""

    def __init__(self, elsewhere: str = "") -> None:
        super().__init__()
        self.elsewhere = elsewhere
        self.seen: list[dict[str, str]] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self.answer)

    async def answer(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(dict(request.headers))
        if request.path == "/download":
            raise web.HTTPFound(f"{self.elsewhere}/file")
        if request.path == "/file":
            return web.Response(body=b"zipdata")
        if request.path == "/post":
            return web.json_response({"message": f"token {request.headers.get('Authorization')} is invalid"}, status=422)
        return web.json_response({"message": "ok"})


def test_the_token_never_shows_nor_goes_to_another_origin(tmp_path: Path) -> None:
    other = Echoing().start()
    api = Echoing(other.url).start()
    token = "ghs_sekret0123456789"

    async def go() -> tuple[str, bool]:
        async with ForgeClient("GitHub", api.url, {"Authorization": f"Bearer {token}"}) as client:
            with pytest.raises(ForgeError) as raised:
                await client.call("POST", client.url("/post"), {"body": "x"}, ok=(201,))
            fetched = await client.download(client.url("/download"), tmp_path / "f.zip")
            return str(raised.value), fetched

    try:
        message, fetched = asyncio.run(go())
    finally:
        api.stop()
        other.stop()
    assert token not in message and "***" in message and "HTTP 422" in message
    assert fetched and (tmp_path / "f.zip").read_bytes() == b"zipdata"
    assert api.seen[-1]["Authorization"] == f"Bearer {token}"
    assert other.seen and all("Authorization" not in h for h in other.seen)


def _post(config: Path, run: Path, forge: str, env: dict[str, str]) -> Any:
    result = evalx("comment", "-c", str(config), str(run), "--post", forge, env=env)
    assert result.exit_code == 0, result.output
    return result


def test_a_persons_comment_that_starts_with_the_marker_is_never_overwritten(tmp_path: Path) -> None:
    """The sticky comment is evalx's own: a bot's, or the token's user's. A person's comment quoting the marker stays."""
    from forge_servers import BlobStore, FakeGitHub, FakeGitLab
    from local_actions import pull_request_event, write_event

    config, _, run = two_runs(tmp_path, two="5")
    marker = "<!-- evalx-comment -->"
    planted = {"id": 1, "body": f"{marker}\nlooks like evalx's", "user": {"login": "mallory", "type": "User"}}
    github = FakeGitHub("ghs_token0123456789", BlobStore().start()).start()
    gitlab = FakeGitLab("glpat-token0123456789").start()
    try:
        event = write_event(tmp_path / "event.json", pull_request_event(7))
        gh_env = {
            "GITHUB_API_URL": github.url,
            "GITHUB_REPOSITORY": "acme/bot",
            "GITHUB_EVENT_PATH": str(event),
            "GITHUB_EVENT_NAME": "pull_request",
            "GITHUB_TOKEN": "ghs_token0123456789",
        }
        # GITHUB_TOKEN (/user refused): the person's comment stays, evalx's own is created, then updated
        github.comments[7] = [dict(planted)]
        _post(config, run, "github", gh_env)
        _post(config, run, "github", gh_env)
        human, ours = github.comments[7]
        assert human["body"] == planted["body"]
        assert ours["body"].startswith(marker) and ours["user"]["type"] == "Bot"
        assert len(github.calls("POST")) == 1 and len(github.calls("PATCH")) == 1

        # a person's token: that person's earlier comment is evalx's, another person's is not
        github.comments[8] = [dict(planted, id=2), {"id": 3, "body": f"{marker}\nold", "user": {"login": "ci-user", "type": "User"}}]
        github.login = "ci-user"
        _post(config, run, "github", gh_env | {"GITHUB_EVENT_PATH": str(write_event(tmp_path / "e8.json", pull_request_event(8)))})
        assert [c["body"] == planted["body"] for c in github.comments[8]] == [True, False]
        assert "qa/two" in github.comments[8][1]["body"]

        gl_env = {
            "CI_API_V4_URL": gitlab.api_url,
            "CI_PROJECT_ID": "42",
            "CI_MERGE_REQUEST_IID": "3",
            "EVALX_GITLAB_TOKEN": "glpat-token0123456789",
        }
        # a personal access token (not a bot): the person's own note is updated, another person's left alone
        gitlab.username, gitlab.bot = "ci-user", False
        gitlab.notes[3] = [
            {"id": 1, "body": f"{marker}\nplanted", "system": False, "author": {"username": "mallory", "bot": False}},
            {"id": 2, "body": f"{marker}\nold", "system": False, "author": {"username": "ci-user", "bot": False}},
        ]
        _post(config, run, "gitlab", gl_env)
        planted_note, own = gitlab.notes[3]
        assert planted_note["body"].endswith("planted") and "qa/two" in own["body"]
        assert not gitlab.calls("POST") and len(gitlab.calls("PUT")) == 1
    finally:
        github.stop()
        github.store.stop()
        gitlab.stop()
