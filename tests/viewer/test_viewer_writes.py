"""Issue 30, class 7: concurrent writers and links in run folders, through the app `evalx view` serves — 60 marks at once over
two started viewer processes all answered and stored once; a copied run folder named and never written; a link in a run folder
never written through; a page view writes nothing (on an in-process server where one viewer and no hang are at stake)."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from aiohttp.test_utils import TestClient
from viewer_project import make_runs, started_viewer, with_client

from evalx.results.reviews import REVIEWS, add_mark
from evalx.viewer.app import make_app

CASES = ("steady", "flip", "up1", "up2", "never")


def post_mark(base: str, run_id: str, case: str, comment: str, verdict: str = "pass") -> tuple[int, str]:
    body = urlencode({"run": run_id, "target": "bot", "dataset": "d", "case": case, "verdict": verdict, "comment": comment}).encode()
    request = urllib.request.Request(base + "/review", data=body, headers={"Accept": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=300) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def mark(client: TestClient[Any, Any], run_id: str, case: str, comment: str) -> tuple[int, str]:
    """:func:`post_mark` through an in-process server's client."""
    form = {"run": run_id, "target": "bot", "dataset": "d", "case": case, "verdict": "pass", "comment": comment}
    res = await client.post("/review", data=form, headers={"Accept": "application/json"})
    return res.status, await res.text()


async def page_of(client: TestClient[Any, Any], path: str) -> tuple[int, str]:
    res = await client.get(path)
    return res.status, await res.text()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=300) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.slow
def test_sixty_marks_at_once_over_two_viewers_are_all_answered_and_stored_once(tmp_path: Path) -> None:
    config, (run_dir,) = make_runs(tmp_path, "a")
    runs_dir = config.parent / "runs"
    with started_viewer(runs_dir) as (one, _), started_viewer(runs_dir) as (two, _):
        jobs = [((one, two)[i % 2], run_dir.name, CASES[i % len(CASES)], f"mark-{i}", ("pass", "fail")[i % 3 == 0]) for i in range(60)]
        with ThreadPoolExecutor(max_workers=60) as pool:
            answers = list(pool.map(lambda job: post_mark(*job), jobs))
    assert [status for status, _ in answers] == [200] * 60, [a for a in answers if a[0] != 200][:3]
    stored = [json.loads(line) for line in (run_dir / REVIEWS).read_text().splitlines()]
    assert sorted(m["comment"] for m in stored) == sorted(f"mark-{i}" for i in range(60))  # every mark once
    json.loads((run_dir / "summary.json").read_text())  # whole, not a half-written copy
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


def test_a_copied_run_folder_is_named_and_marks_go_to_the_folder_named_for_the_run(tmp_path: Path) -> None:
    config, (run_dir,) = make_runs(tmp_path, "a")
    runs_dir = config.parent / "runs"
    for copy in ("0-backup", "zz-backup"):  # sorted before and after the run's own folder
        shutil.copytree(run_dir, runs_dir / copy)

    async def body(client: TestClient[Any, Any]) -> None:
        status, page = await page_of(client, "/")
        assert status == 200 and page.count(f'data-run="{run_dir.name}"') == 1
        assert "0-backup/" in page and "zz-backup/" in page and f"from {run_dir.name}/ only" in page
        status, answer = await mark(client, run_dir.name, "flip", "the run's own")
        assert status == 200, answer

    with_client(make_app(runs_dir), body)
    assert json.loads((run_dir / REVIEWS).read_text())["comment"] == "the run's own"
    assert not (runs_dir / "0-backup" / REVIEWS).exists() and not (runs_dir / "zz-backup" / REVIEWS).exists()


def test_links_in_a_run_folder_are_never_written_through(tmp_path: Path) -> None:
    config, (run_dir, other) = make_runs(tmp_path, "ab")
    runs_dir = config.parent / "runs"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "marks.jsonl").write_text("")
    (run_dir / REVIEWS).symlink_to(outside / "marks.jsonl")
    shutil.copy(other / "summary.json", outside / "summary.json")
    kept = (outside / "summary.json").read_bytes()
    (other / "summary.json").unlink()
    (other / "summary.json").symlink_to(outside / "summary.json")

    async def body(client: TestClient[Any, Any]) -> None:
        status, answer = await mark(client, run_dir.name, "flip", "through a link")
        assert status == 400 and "symbolic link" in answer and answer.count("\n") == 1, answer
        status, answer = await mark(client, other.name, "flip", "rebuilds the summary")
        assert status == 200, answer

    with_client(make_app(runs_dir), body)
    assert (outside / "marks.jsonl").read_text() == ""  # the mark did not leave the run folder
    assert (outside / "summary.json").read_bytes() == kept  # the link was replaced by the run's own file
    assert not (other / "summary.json").is_symlink() and json.loads((other / "summary.json").read_text())["reviews"]["marks"] == 1


def test_viewing_a_run_writes_nothing(tmp_path: Path) -> None:
    config, (run_dir,) = make_runs(tmp_path, "a")
    add_mark(run_dir, target="bot", dataset="d", case_id="never", verdict="pass", reviewer="cli")  # newer than report.html
    before = snapshot(run_dir)

    async def body(client: TestClient[Any, Any]) -> None:
        for _ in range(2):
            status, page = await page_of(client, f"/run/{run_dir.name}")
            assert status == 200 and "1 cell reviewed, 1 overridden" in page  # rendered with the mark, in memory
            status, page = await page_of(client, f"/run/{run_dir.name}/review")
            assert status == 200

    with_client(make_app(config.parent / "runs"), body)
    assert snapshot(run_dir) == before


def test_a_report_not_written_by_this_evalx_is_rendered_again_in_memory(tmp_path: Path) -> None:
    config, (run_dir,) = make_runs(tmp_path, "a")
    report = run_dir / "report.html"
    planted = report.read_text().replace("'sha256-", "'sha256-AAAA", 1).replace("<body", "<body data-planted=yes", 1)
    report.write_text(planted)
    before = snapshot(run_dir)
    answers: list[tuple[int, str]] = []

    async def body(client: TestClient[Any, Any]) -> None:
        answers.append(await page_of(client, f"/run/{run_dir.name}"))

    with_client(make_app(config.parent / "runs"), body)
    ((status, page),) = answers
    assert status == 200 and "data-planted" not in page and "sha256-AAAA" not in page and "evalx-data" in page
    assert snapshot(run_dir) == before


def test_a_run_folder_with_a_file_that_is_not_a_file_is_named_and_every_page_still_answers(tmp_path: Path) -> None:
    import os

    config, (good, bad) = make_runs(tmp_path, "ab")
    os.mkfifo(bad / REVIEWS)  # a FIFO nobody writes: reading it would wait for ever
    with started_viewer(config.parent / "runs") as (base, _):
        status, page = get(base + "/")
        assert status == 200 and f'data-run="{good.name}"' in page, page[:500]
        assert f"{bad.name}/ is not shown" in page and "not a regular file (a FIFO)" in page
        for path in (f"/run/{good.name}", "/cases", f"/run/{good.name}/review"):
            assert get(base + path)[0] == 200, path
        assert get(base + f"/run/{bad.name}")[0] == 404  # not listed, not read: one line, no traceback (started_viewer checks)
