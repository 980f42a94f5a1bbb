"""Issue 30, class 1: markup from run data. Run ids that are attribute, script and element injections, and a hostile index
cache, shown by a started `evalx view` and in `evalx report --history`'s file, in headless Chromium: no handler runs, no element
is made, the text is shown as text; a wrongly typed cache is rebuilt, never a 500."""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from aiohttp.test_utils import TestClient
from browser import chromium
from cli_project import evalx
from viewer_project import make_runs, runs_apart, started_viewer, with_client

from evalx.viewer.app import make_app
from evalx.viewer.index import INDEX_DIR

HOSTILE_IDS = [
    "x autofocus tabindex=1 onfocus=document.title='XSS'",
    'q" autofocus tabindex="1" onfocus="document.title=\'XSS\'" x="',
    "q' autofocus tabindex='1' onfocus='document.title=`XSS`' x='",
    "</script><script>document.title='XSS'</script>",
    "<img src=x onerror=\"document.title='XSS'\">",
]
HOSTILE_CASE = "<img src=x onerror=document.title='XSS'>"

#: what the browser finds that a page of ours never has: injected elements, handlers, scripts beyond our one
PROBE = """() => {
  document.querySelectorAll('[tabindex],[autofocus]').forEach(function (e) { try { e.focus(); } catch (x) {} });
  return {
    title: document.title,
    injected: document.querySelectorAll('img,[onfocus],[onerror],[autofocus]').length,
    scripts: document.querySelectorAll('script').length,
    text: document.body.innerText,
  };
}"""


def _hostile_runs(tmp_path: Path, *, apart: bool = True) -> tuple[Path, list[Path]]:
    """Runs named by :data:`HOSTILE_IDS`: by `evalx run`s in processes of their own, or in this one (``apart=False``)."""
    config, dirs = runs_apart(tmp_path, len(HOSTILE_IDS)) if apart else make_runs(tmp_path, "a" * len(HOSTILE_IDS))
    for run_dir, hostile in zip(dirs, HOSTILE_IDS, strict=True):
        meta = json.loads((run_dir / "run.json").read_text())
        meta["run_id"] = hostile
        (run_dir / "run.json").write_text(json.dumps(meta))
    return config.parent / "runs", dirs


def _poison_cache(runs_dir: Path, run_dir: Path, hostile_id: str) -> None:
    """A cache that matches its run's files (as one restored from a CI artifact would) and carries markup in a case id."""
    cache = runs_dir / INDEX_DIR / f"{run_dir.name}.json"
    data = json.loads(cache.read_text())
    assert data["run_id"] == hostile_id
    data["cases"].append(["bot", "d", HOSTILE_CASE, "fail", None, None, 1, 0, 0])
    cache.write_text(json.dumps(data))


@pytest.fixture
def browser() -> Iterator[Any]:
    """For its one test alone: Playwright's loop owns the thread while it runs, and the other tests run evalx here."""
    yield from chromium()


@pytest.fixture(scope="module")
def indexed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with one run whose index cache `evalx report --history` wrote; the tests damage copies of it."""
    folder = tmp_path_factory.mktemp("indexed")
    config, _ = make_runs(folder, "a")
    done = evalx("report", "--history", str(config.parent / "runs"), "-o", str(folder / "h.html"))
    assert done.returncode == 0, done.stderr
    return folder


@pytest.mark.slow
def test_hostile_run_ids_and_a_hostile_cache_stay_text_in_the_browser(browser: Any, tmp_path: Path) -> None:
    runs_dir, dirs = _hostile_runs(tmp_path)
    # the index cache is written by a first look, then poisoned with its signature kept
    subprocess.run([sys.executable, "-m", "evalx.cli", "report", "--history", str(runs_dir), "-o", str(tmp_path / "h0.html")], check=True)
    _poison_cache(runs_dir, dirs[0], HOSTILE_IDS[0])
    history = tmp_path / "history.html"
    res = subprocess.run(
        [sys.executable, "-m", "evalx.cli", "report", "--history", str(runs_dir), "-o", str(history)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    page = browser.new_page()
    blocked: list[str] = []
    page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
    with started_viewer(runs_dir) as (base, _):
        urls = [
            base + "/",
            base + "/cases",
            base + "/case?" + urlencode({"target": "bot", "dataset": "d", "case": "flip"}),
            base + "/case?" + urlencode({"target": "bot", "dataset": "d", "case": HOSTILE_CASE}),
            base + "/compare",
            *(base + "/run/" + quote(h, safe="") for h in HOSTILE_IDS),
            *(base + "/run/" + quote(h, safe="") + "/review" for h in HOSTILE_IDS),
            history.as_uri(),
        ]
        for url in urls:
            page.goto(url)
            page.wait_for_load_state("load")
            before = page.title()
            found = page.evaluate(PROBE)
            assert found["title"] == before != "XSS", url
            assert found["injected"] == 0, url
            assert found["scripts"] <= 2, url  # ours (the report's data block is a second, never code)
            if "/run/" not in url or url.endswith("/review"):
                assert any(h in found["text"] for h in [*HOSTILE_IDS, HOSTILE_CASE]), (url, found["text"])  # shown, as text
        # the hostile case id (from the poisoned cache) is listed as text
        page.goto(base + "/cases")
        assert HOSTILE_CASE in page.locator("#cases").inner_text()
    page.close()
    assert "Content-Security-Policy" in history.read_text()


def _data_block_apart(page: str) -> tuple[str, str]:
    """(the page without the HTML report's JSON data block, the block's JSON): the block holds the run's values as data."""
    opening = '<script type="application/json" id="evalx-data">'
    start = page.find(opening)
    if start < 0:
        return page, ""
    end = page.index("</script>", start)
    return page[:start] + page[end:], page[start + len(opening) : end]


def test_every_page_carries_a_script_policy_without_unsafe_inline(tmp_path: Path) -> None:
    runs_dir, _ = _hostile_runs(tmp_path, apart=False)
    with started_viewer(runs_dir) as (base, _):
        for path in ("/", "/cases", "/compare", "/run/" + quote(HOSTILE_IDS[0], safe=""), "/run/nope", "/case?target=x"):
            req = urllib.request.Request(base + path)
            try:
                with urllib.request.urlopen(req, timeout=60) as res:
                    policy, body = res.headers["Content-Security-Policy"], res.read().decode()
            except urllib.error.HTTPError as exc:
                policy, body = exc.headers["Content-Security-Policy"], exc.read().decode()
            script = next(p for p in policy.split(";") if p.strip().startswith("script-src"))
            assert "unsafe" not in script and "'sha256-" in script, (path, policy)
            markup, data = _data_block_apart(body)
            assert "<" not in data and "&" not in data, path  # the report's JSON data block cannot close itself
            for hostile in HOSTILE_IDS:
                assert hostile not in markup, path  # never raw: escaped wherever it is shown
    history = tmp_path / "h.html"
    done = evalx("report", "--history", str(runs_dir), "-o", str(history))
    assert done.returncode == 0, done.stderr
    text = history.read_text()
    assert '<meta http-equiv="Content-Security-Policy"' in text and "script-src 'sha256-" in html.unescape(text)
    assert not any(h in text for h in HOSTILE_IDS)


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d.update(targets={"bot": {"cells": "many"}}),
        lambda d: d.update(cases=[["bot", "d", "flip", "pass", "x", None, 1, 1, 0]]),
        lambda d: d.update(cases=[["bot", "d"]]),
        lambda d: d.update(cases=[[{"a": 1}, "d", "flip", "pass", None, None, 1, 1, 0]]),
        lambda d: d.update(run_id=["not", "a", "string"]),
        lambda d: d.update(reviewed="<b>2</b>"),
        lambda d: d.update(started_unix="soon"),
        lambda d: d.update(gates="<img src=x onerror=alert(1)>"),
        lambda d: d.update(run_id="another-run"),  # a cache may not rename its run
    ],
)
def test_a_wrongly_typed_or_renamed_cache_is_rebuilt_never_a_500(indexed_run: Path, tmp_path: Path, damage: Any) -> None:
    runs_dir = tmp_path / "runs"
    shutil.copytree(indexed_run / "runs", runs_dir)  # the files' times too: the cache still matches its run
    (run_dir,) = (p for p in runs_dir.iterdir() if p.name != INDEX_DIR)
    cache = runs_dir / INDEX_DIR / f"{run_dir.name}.json"
    good = json.loads(cache.read_text())
    bad = json.loads(cache.read_text())
    damage(bad)
    cache.write_text(json.dumps(bad))

    async def pages(client: TestClient[Any, Any]) -> None:
        for path in ("/", "/cases", "/case?target=bot&dataset=d&case=flip", f"/run/{run_dir.name}/review", f"/run/{run_dir.name}"):
            res = await client.get(path)
            body = await res.text()
            assert res.status == 200, (path, body)
            assert "another-run" not in body and "<b>2</b>" not in body

    with_client(make_app(runs_dir), pages)  # the app `evalx view` serves, on 127.0.0.1 in this process
    again = json.loads(cache.read_text())  # rebuilt from the run's files, and stored right
    assert again == good


#: a run folder's `report.html` as a hostile artifact could hold it: our script's hash (so it passes for one of ours), a form
#: that posts a review mark over the whole page, and a refresh away
PLANTED_REPORT = """<!doctype html><html><head><title>PLANTED</title>
<meta http-equiv="refresh" content="2;url=https://evil.example/phish"></head><body>
<!-- {hash} -->
<form id="planted" method="post" action="/review"><input type="hidden" name="run" value="{run}">
<input type="hidden" name="target" value="bot"><input type="hidden" name="dataset" value="d"><input type="hidden" name="case" value="never">
<input type="hidden" name="verdict" value="pass"><button id="cover" style="position:fixed;inset:0">Continue</button></form>
</body></html>"""


def _plant_report(run_dir: Path) -> None:
    from evalx.reports.html import report_script_source

    text = PLANTED_REPORT.format(hash=report_script_source().strip("'"), run=run_dir.name)
    (run_dir / "report.html").write_text(text)


def test_a_stored_report_is_never_served_the_run_page_is_rendered_from_the_runs_data(tmp_path: Path) -> None:
    config, (run_dir,) = make_runs(tmp_path, "a")
    _plant_report(run_dir)
    answers: list[tuple[int, str, str]] = []

    async def body(client: TestClient[Any, Any]) -> None:
        for _ in range(2):  # the second view is served from memory: the same page
            res = await client.get(f"/run/{run_dir.name}")
            answers.append((res.status, await res.text(), res.headers["Content-Security-Policy"]))

    with_client(make_app(config.parent / "runs"), body)
    for status, page, policy in answers:
        assert status == 200 and "PLANTED" not in page and 'id="planted"' not in page and "evil.example" not in page
        assert "evalx-data" in page and "Review cells" in page  # the report of the run's cells, under the viewer's bar
        assert "form-action 'none'" in policy
    assert answers[0][1] == answers[1][1]
    assert "PLANTED" in (run_dir / "report.html").read_text()  # and the folder is not touched


@pytest.mark.slow
def test_a_planted_report_cannot_post_a_mark_or_leave_in_the_browser(browser: Any, tmp_path: Path) -> None:
    _, (run_dir,) = runs_apart(tmp_path, 1)
    _plant_report(run_dir)
    page = browser.new_page()
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method != "GET" else None)
    with started_viewer(run_dir.parent) as (base, _):
        page.goto(base + "/run/" + run_dir.name)
        page.wait_for_load_state("load")
        assert page.title() != "PLANTED" and page.locator("#planted").count() == 0
        page.mouse.click(200, 200)  # where the planted page's button covered everything
        page.wait_for_timeout(2500)  # past the planted refresh
        assert page.url == base + "/run/" + run_dir.name
    page.close()
    assert posts == [] and not (run_dir / "reviews.jsonl").exists()


@pytest.mark.parametrize("counts", [False, True])
@pytest.mark.parametrize("junk", [1e999, float("nan"), "<b>9</b>", [1], {"n": 1}])
def test_a_summary_whose_figures_are_not_numbers_is_read_from_the_cells_never_a_500(
    indexed_run: Path, tmp_path: Path, junk: object, counts: bool
) -> None:
    runs_dir = tmp_path / "runs"
    shutil.copytree(indexed_run / "runs", runs_dir)
    shutil.rmtree(runs_dir / INDEX_DIR)  # the runs page reads each run's summary while the index is built
    (run_dir,) = (p for p in runs_dir.iterdir() if p.name != INDEX_DIR)
    summary = json.loads((run_dir / "summary.json").read_text())
    for figures in summary["per_target"].values():
        for key in ("pass_rate", "cost_usd", *(("cells", "pass") if counts else ())):
            figures[key] = junk
        figures["latency_ms"] = {"p99": junk}
    (run_dir / "summary.json").write_text(json.dumps(summary))

    async def pages(client: TestClient[Any, Any]) -> None:
        for path in ("/", "/cases", f"/run/{run_dir.name}", f"/run/{run_dir.name}/review"):
            res = await client.get(path)
            body = await res.text()
            assert res.status == 200, (path, body[:300])
            assert "<b>9</b>" not in body and "inf%" not in body and "nan%" not in body, path

    with_client(make_app(runs_dir), pages)
