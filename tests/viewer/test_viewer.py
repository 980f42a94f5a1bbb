"""`evalx view`: the app's pages over real runs, its safety checks (Host, Origin, token), new runs picked up, the real server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from results_file import read_cells
from viewer_project import make_runs, run_mode, with_client

from evalx.results.reviews import REVIEWS, add_mark
from evalx.viewer.app import make_app
from evalx.viewer.index import INDEX_DIR, load_history


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    return make_runs(tmp_path_factory.mktemp("viewer"), "aba")


def test_pages_show_runs_case_history_and_a_comparison(runs: tuple[Path, list[Path]]) -> None:
    config, dirs = runs
    a, b, c = (d.name for d in dirs)
    runs_dir = config.parent / "runs"

    async def body(client: TestClient[Any, Any]) -> None:
        page = await (await client.get("/")).text()
        assert all(run in page for run in (a, b, c)) and "Pass rate" in page and "<svg" in page
        assert page.index(c) < page.index(a)  # newest first in the table
        assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing from the network

        cases = await (await client.get("/cases", params={"flag": "regressed"})).text()
        assert "d/flip" in cases and "regressed while the average rose" in cases and "d/steady" not in cases
        never = await (await client.get("/cases", params={"flag": "never-passing"})).text()
        assert "d/never" in never and "d/flip" not in never
        flaky = await (await client.get("/cases", params={"flag": "flaky"})).text()
        assert "d/flip" in flaky and "d/up1" in flaky and "d/steady" not in flaky

        case = await client.get("/case", params={"target": "bot", "dataset": "d", "case": "flip"})
        text = await case.text()
        assert case.status == 200 and text.count('class="case-run"') == 3 and "failed while the pass rate rose" in text
        missing = await client.get("/case", params={"target": "bot", "dataset": "d", "case": "nope"})
        assert missing.status == 404

        cmp = await (await client.get("/compare", params={"a": a, "b": b})).text()
        flips = cmp[cmp.index('id="flips"') :]
        assert flips.index("d/flip") < flips.index("d/up1")  # newly failing first
        assert '<span class="del">-flip</span>' in cmp and '<span class="add">+a different answer</span>' in cmp
        assert 'id="comparison"' in cmp and "newly failing" in cmp.lower()

        report = await client.get(f"/run/{b}")
        assert report.status == 200 and "evalx-viewer-bar" in await report.text()
        assert (await client.get("/run/nope")).status == 404

    with_client(make_app(runs_dir), body)


def test_a_review_mark_posted_is_stored_counted_and_shown(tmp_path: Path) -> None:
    config, dirs = make_runs(tmp_path, "ab")
    runs_dir, second = config.parent / "runs", dirs[1]

    async def body(client: TestClient[Any, Any]) -> None:
        origin = f"http://{client.host}:{client.port}"
        form = {
            "run": second.name,
            "target": "bot",
            "dataset": "d",
            "case": "flip",
            "verdict": "pass",
            "comment": "also right",
            "back": "/cases",
        }
        res = await client.post("/review", data=form, headers={"Origin": origin}, allow_redirects=False)
        assert res.status == 303 and res.headers["Location"] == "/cases"
        case = await (await client.get("/case", params={"target": "bot", "dataset": "d", "case": "flip"})).text()
        assert 'data-review="pass"' in case and "reviewed pass by tester" in case and "also right" in case
        bad = await client.post("/review", data={**form, "verdict": "maybe"}, headers={"Origin": origin})
        assert bad.status == 400 and "use pass or fail" in await bad.text()
        # a hostile back link goes home instead
        for hostile in ("//evil.example/", "/\\evil.example/", "https://evil.example/"):
            res = await client.post("/review", data={**form, "back": hostile}, headers={"Origin": origin}, allow_redirects=False)
            assert res.headers["Location"] == "/"

    with_client(make_app(runs_dir, reviewer="tester"), body)
    marks = [json.loads(line) for line in (second / REVIEWS).read_text().splitlines()]
    assert marks[0]["reviewer"] == "tester" and marks[0]["verdict"] == "pass" and "repeat" not in marks[0]
    assert {c["case_id"]: c["status"] for c in read_cells(second)}["flip"] == "pass"
    summary = json.loads((second / "summary.json").read_text())  # the run's files were rendered again with the mark
    assert summary["reviews"]["overridden_cells"] == 1 and summary["reviews"]["marks"] == 4


def test_host_and_origin_are_checked(runs: tuple[Path, list[Path]]) -> None:
    config, dirs = runs
    form = {"run": dirs[0].name, "target": "bot", "dataset": "d", "case": "steady", "verdict": "fail"}

    async def body(client: TestClient[Any, Any]) -> None:
        port = client.port
        assert (await client.get("/", headers={"Host": f"localhost:{port}"})).status == 200
        rebound = await client.get("/", headers={"Host": f"evil.example:{port}"})  # DNS rebinding: a foreign name
        assert rebound.status == 403 and "Host" in await rebound.text()
        cross = await client.post("/review", data=form, headers={"Origin": "http://evil.example"})
        assert cross.status == 403 and "another origin" in await cross.text()
        null = await client.post("/review", data=form, headers={"Origin": "null"})
        assert null.status == 403
        referer = await client.post("/review", data=form, headers={"Referer": "http://evil.example/page"})
        assert referer.status == 403
        fetch = await client.post("/review", data=form, headers={"Sec-Fetch-Site": "cross-site"})
        assert fetch.status == 403
        other_port = await client.post("/review", data=form, headers={"Origin": f"http://127.0.0.1:{port + 1}"})
        assert other_port.status == 403

    with_client(make_app(config.parent / "runs"), body)
    assert not (dirs[0] / REVIEWS).exists()  # nothing was written


def test_off_loopback_every_request_needs_the_token(runs: tuple[Path, list[Path]]) -> None:
    config, dirs = runs

    async def body(client: TestClient[Any, Any]) -> None:
        assert (await client.get("/")).status == 401
        assert (await client.get("/", params={"token": "wrong"})).status == 401
        first = await client.get("/", params={"token": "s3cret-token"}, allow_redirects=False)
        assert first.status == 303 and "token" not in first.headers["Location"] and "evalx_token" in first.cookies
        assert (await client.get("/cases")).status == 200  # the cookie carries it now
        client.session.cookie_jar.clear()
        assert (await client.get("/cases")).status == 401
        assert (await client.get("/cases", headers={"X-Evalx-Token": "s3cret-token"})).status == 200
        form = {"run": dirs[2].name, "target": "bot", "dataset": "d", "case": "never", "verdict": "pass", "back": "/"}
        origin = f"http://{client.host}:{client.port}"
        assert (await client.post("/review", data=form, headers={"Origin": origin})).status == 401
        ok = await client.post("/review", data={**form, "token": "s3cret-token"}, headers={"Origin": origin}, allow_redirects=False)
        assert ok.status == 303

    with_client(make_app(config.parent / "runs", host="0.0.0.0", token="s3cret-token"), body)
    assert (dirs[2] / REVIEWS).is_file()


def test_new_runs_and_new_marks_are_picked_up(tmp_path: Path) -> None:
    config, dirs = make_runs(tmp_path, "a")
    runs_dir = config.parent / "runs"
    later: list[Path] = []

    async def body(client: TestClient[Any, Any]) -> None:
        page = await (await client.get("/")).text()
        assert dirs[0].name in page and 'Runs <span class="muted">(1)' in page
        later.append(await asyncio.to_thread(run_mode, config, "b"))
        page = await (await client.get("/")).text()
        assert later[0].name in page and 'Runs <span class="muted">(2)' in page
        add_mark(later[0], target="bot", dataset="d", case_id="flip", verdict="pass", reviewer="cli")  # not through the app
        page = await (await client.get("/")).text()
        assert "1 reviewed" in page and "80.0%" in page  # 4 of 5 with the mark
        assert (await client.get("/cases")).status == 200  # the case list indexes every run

    with_client(make_app(runs_dir), body)
    assert sorted(p.name for p in (runs_dir / INDEX_DIR).iterdir()) == sorted(f"{d.name}.json" for d in (dirs[0], later[0]))


def test_the_index_file_is_reused_and_matches_a_fresh_read(runs: tuple[Path, list[Path]]) -> None:
    config, _ = runs
    runs_dir = config.parent / "runs"
    from evalx.viewer import index

    first = load_history(runs_dir)
    index._MEMORY.clear()  # a new process: the index files are read, not the results
    again = load_history(runs_dir)
    assert [(r.run_id, r.cases, r.targets) for r in first.runs] == [(r.run_id, r.cases, r.targets) for r in again.runs]


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_evalx_view_serves_on_loopback_by_default(runs: tuple[Path, list[Path]], sigint: str) -> None:
    """It listens on 127.0.0.1 and stops on Ctrl-C, also when started with SIGINT ignored (a script's background job:
    Python then leaves it ignored, and the viewer ran on after the test's Ctrl-C)."""
    config, _ = runs
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalx.cli", "view", str(config.parent / "runs"), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint == "ignored" else None,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once the socket listens
        match = re.search(r"at (http://127\.0\.0\.1:(\d+)/)$", line.strip())
        assert match, line
        with urllib.request.urlopen(match.group(1), timeout=10) as res:
            assert res.status == 200 and b"Runs" in res.read()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


def test_view_refuses_a_missing_folder(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from evalx.cli import main

    res = CliRunner().invoke(main, ["view", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "no such folder" in res.output and "Traceback" not in res.output


def test_evalx_view_off_loopback_prints_a_token_and_requires_it(runs: tuple[Path, list[Path]]) -> None:
    config, _ = runs
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalx.cli", "view", str(config.parent / "runs"), "--host", "0.0.0.0", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"http://0\.0\.0\.0:(\d+)/\?token=([\w-]{20,})", line)
        assert match and "the token is needed" in line, line
        port, token = match.groups()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        assert refused.value.code == 401
        request = urllib.request.Request(f"http://127.0.0.1:{port}/", headers={"X-Evalx-Token": token})
        with urllib.request.urlopen(request, timeout=10) as res:
            assert res.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)  # a service manager's stop: ends as Ctrl-C does
        assert proc.wait(timeout=10) == 0


def test_the_runs_page_of_a_folder_never_viewed_reads_summaries_only(tmp_path: Path) -> None:
    config, dirs = make_runs(tmp_path, "abab")
    runs_dir = config.parent / "runs"
    from evalx.viewer import index

    index._MEMORY.clear()
    quick = load_history(runs_dir, headlines=True)
    assert all(r.headline and not r.cases for r in quick.runs) and not (runs_dir / INDEX_DIR).exists()
    full = load_history(runs_dir)
    assert not any(r.headline for r in full.runs)
    keys = ("cells", "pass", "fail", "error", "skipped", "pass_rate", "cost_usd", "p99_ms")
    for a, b in zip(quick.runs, full.runs, strict=True):
        assert a.run_id == b.run_id and a.gates == b.gates
        assert {t: {k: v[k] for k in keys} for t, v in a.targets.items()} == {t: {k: v[k] for k in keys} for t, v in b.targets.items()}
    # a mark newer than the summary: that run is read, not taken from its stale summary
    add_mark(dirs[1], target="bot", dataset="d", case_id="flip", verdict="pass", reviewer="cli")
    index._MEMORY.clear()
    shutil.rmtree(runs_dir / INDEX_DIR)
    again = {r.run_id: r for r in load_history(runs_dir, headlines=True).runs}
    assert not again[dirs[1].name].headline and again[dirs[1].name].reviewed == 1 and again[dirs[0].name].headline


def test_a_review_score_replaces_the_cells_score_where_its_verdict_counts(tmp_path: Path) -> None:
    """A mark may carry a 0-1 score (issue 35): stored, applied to the cell's score, counted in the summary, shown, checked."""
    config, dirs = make_runs(tmp_path, "ab")
    runs_dir, second = config.parent / "runs", dirs[1]
    before = {c["case_id"]: c for c in read_cells(second)}["flip"]

    async def body(client: TestClient[Any, Any]) -> None:
        origin = f"http://{client.host}:{client.port}"
        form = {"run": second.name, "target": "bot", "dataset": "d", "case": "flip", "verdict": "pass", "score": "0.25", "back": "/"}
        res = await client.post("/review", data=form, headers={"Origin": origin}, allow_redirects=False)
        assert res.status == 303
        case = await (await client.get("/case", params={"target": "bot", "dataset": "d", "case": "flip"})).text()
        assert "reviewed pass (score 0.25) by tester" in case
        for bad in ("1.5", "-0.1", "abc", "nan", "1e-1"):
            res = await client.post("/review", data={**form, "score": bad}, headers={"Origin": origin})
            assert res.status == 400 and "not a number from 0 to 1" in await res.text(), bad

    with_client(make_app(runs_dir, reviewer="tester"), body)
    (mark,) = [json.loads(line) for line in (second / REVIEWS).read_text().splitlines()]
    assert mark["score"] == 0.25
    cell = {c["case_id"]: c for c in read_cells(second)}["flip"]
    assert cell["score"] == 0.25 and cell["review"]["score"] == 0.25 and cell["review"]["original_score"] == before["score"]
    summary = json.loads((second / "summary.json").read_text())
    scores = [c["score"] if c["case_id"] != "flip" else 0.25 for c in read_cells(second) if c.get("score") is not None]
    assert summary["per_target"]["bot"]["mean_score"] == pytest.approx(sum(scores) / len(scores))
    assert "score 0.25 (the run's:" in (second / "junit.xml").read_text()
    with pytest.raises(Exception, match="a number from 0 to 1"):
        add_mark(second, target="bot", dataset="d", case_id="flip", verdict="pass", score=True)  # type: ignore[arg-type]
