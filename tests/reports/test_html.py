"""The HTML report: escaping and embedding, and the real page in headless Chromium.

The browser tests load a report written by a real `evalx run` of an agent
whose answers are hostile (script tags, onerror handlers, `</script>`, ANSI,
NUL, 200 KB, Chinese and Arabic) and check that nothing from the data runs,
nothing is fetched, every case and target is shown and the filters work.
They skip when /usr/bin/chromium or Playwright's Python package is missing
(`.ci/browser` installs Chromium; `pip install -e '.[test]'` Playwright).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import chromium
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main
from evalx.reports import write_html
from evalx.reports.html import TEXT_CAP, clean_text, embed_json
from evalx.results.summary import SummaryBuilder

SCRIPT_XSS = "<script>window.__pwned=1</script>"
IMG_XSS = '<img src=x onerror="window.__pwned=1">'
CLOSE_XSS = "</script><script>window.__pwned=1</script><!--"
CHINESE = "退款需要多长时间？你好，世界"
ARABIC = "مرحبا بالعالم، كم يستغرق الاسترداد؟"
HUGE = "0123456789" * 20_000  # 200 KB

AGENT = """
HOSTILE = {
    "script": "<script>window.__pwned=1</script> hello",
    "img": '<img src=x onerror="window.__pwned=1"> hello',
    "close": '</script><script>window.__pwned=1</script><!-- hello',
    "ansi": "\\x1b[31mred hello\\x1b[0m \\x1b]0;title\\x07done",
    "nul": "before\\x00after hello",
    "huge": "0123456789" * 20_000,
    "chinese": "退款需要多长时间？你好，世界",
    "arabic": "مرحبا بالعالم، كم يستغرق الاسترداد؟",
}


def answer(question):
    if question == "crash":
        raise RuntimeError("boom <script>window.__pwned=1</script>")
    return {
        "text": HOSTILE[question],
        "tool_calls": [{"name": "lookup<b>", "args": {"q": "<img src=x onerror=window.__pwned=1>"}, "result": "</script>"}],
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def plain(question):
    return "hello" if question in ("script", "chinese") else "no"
"""

CONFIG = """
version: 1
name: "hostile <script>window.__pwned=1</script>"
defaults: {timeout_s: 10, retries: 0}
targets:
  - {id: hostile-bot, type: python, callable: html_hostile_agent.py:answer}
  - {id: plain-bot, type: python, callable: html_hostile_agent.py:plain}
datasets:
  - id: evil
    cases:
      - {id: xss-script, input: script, category: xss, difficulty: hard, tags: [html]}
      - {id: xss-img, input: img, category: xss, tags: [html]}
      - {id: close-script, input: close, category: "<svg onload=window.__pwned=1>", tags: ["<i>tag</i>"]}
      - {id: ansi, input: ansi, category: terminal}
      - {id: nul, input: nul, category: terminal}
      - {id: huge, input: huge, category: size}
      - {id: chinese, input: chinese, category: i18n}
      - {id: arabic, input: arabic, category: i18n}
      - {id: crash, input: crash, category: errors}
assert:
  - {type: contains, value: hello}
output: {dir: runs}
"""
CASES = ["xss-script", "xss-img", "close-script", "ansi", "nul", "huge", "chinese", "arabic", "crash"]
TARGETS = ["hostile-bot", "plain-bot"]


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `evalx run` of the hostile agent; returns its run directory."""
    project = tmp_path_factory.mktemp("hostile")
    (project / "html_hostile_agent.py").write_text(AGENT, encoding="utf-8")
    (project / "evalconfig.yaml").write_text(CONFIG, encoding="utf-8")
    result = CliRunner().invoke(main, ["run", "-c", str(project / "evalconfig.yaml"), "-q", "--html", str(project / "copy.html")])
    assert result.exit_code == 1, result.output  # some cells fail, one errors
    (run_dir,) = [p for p in (project / "runs").iterdir() if p.is_dir()]
    return run_dir


def _page_without_data(html: str) -> str:
    return re.sub(r'<script type="application/json" id="evalx-data">.*?</script>', "", html, flags=re.S)


def _data(html: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="evalx-data">(.*?)</script>', html, flags=re.S)
    assert match
    return json.loads(match.group(1))  # type: ignore[no-any-return]


# ---------------------------------------------------------------- embedding and escaping


def test_embed_json_cannot_end_the_script_and_round_trips() -> None:
    value = {"a": CLOSE_XSS, "b": "x & y > z", "c": "line\u2028sep\u2029para", "d": "<!-- -->", "e": "\x00nul"}
    text = embed_json(value)
    for raw in ("<", ">", "&", "\u2028", "\u2029"):
        assert raw not in text
    assert "\\u003c/script\\u003e" in text
    assert json.loads(text) == value


def test_embed_json_replaces_lone_surrogates() -> None:
    text = embed_json({"s": "ok\ud800"})
    text.encode("utf-8")  # would raise on a lone surrogate
    assert json.loads(text) == {"s": "ok\ufffd"}


def test_clean_text_strips_ansi_and_shows_control_characters() -> None:
    assert clean_text("\x1b[1;31mred\x1b[0m") == "red"
    assert clean_text("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\") == "link"
    assert clean_text("a\x00b\x07c") == "a\u2400b\u2407c"
    assert clean_text("one\r\ntwo\rthree\tfour") == "one\ntwo\nthree\tfour"
    assert clean_text(CHINESE + ARABIC) == CHINESE + ARABIC
    assert clean_text({"k": [1, "<v>"]}) == '{"k": [1, "<v>"]}'
    assert clean_text(None) == ""


def test_run_writes_report_with_hostile_data_escaped(hostile_run: Path) -> None:
    html = (hostile_run / "report.html").read_text(encoding="utf-8")
    page = _page_without_data(html)
    # only our two <script> elements; nothing from the data is markup
    assert html.count("<script") == 2 and html.count("</script>") == 2
    assert "<script>window" not in page and "<img" not in page
    assert "<svg onload" not in page and "&lt;svg onload=window.__pwned=1&gt;" in page  # the chart label, escaped
    assert "hostile &lt;script&gt;window.__pwned=1&lt;/script&gt;" in page  # the run name in the header
    # nothing that could fetch: no src/href attributes, no URLs, a CSP that forbids the network
    assert not re.search(r"\b(src|href|srcset|action)\s*=", page)
    assert not re.search(r"https?://|url\(|@import", page)
    assert "default-src 'none'" in page
    # the CSP admits exactly our script, by hash
    js = re.search(r"<script>(.*?)</script>", page, flags=re.S)
    assert js
    digest = base64.b64encode(hashlib.sha256(js.group(1).encode("utf-8")).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in page


def test_embedded_data_is_cleaned_and_clipped(hostile_run: Path) -> None:
    data = _data((hostile_run / "report.html").read_text(encoding="utf-8"))
    assert data["targets"] == TARGETS
    assert [c["id"] for c in data["cases"]] == CASES
    text = {(data["cases"][x["c"]]["id"], data["targets"][x["t"]]): x for x in data["cells"]}
    assert text[("xss-script", "hostile-bot")]["x"] == "<script>window.__pwned=1</script> hello"  # kept as text
    assert text[("ansi", "hostile-bot")]["x"] == "red hello done"
    assert text[("nul", "hostile-bot")]["x"] == "before\u2400after hello"
    assert text[("chinese", "hostile-bot")]["x"] == CHINESE
    assert text[("arabic", "hostile-bot")]["x"] == ARABIC
    huge = text[("huge", "hostile-bot")]
    assert len(huge["x"]) == TEXT_CAP and huge["xN"] == len(HUGE)
    crash = text[("crash", "hostile-bot")]
    assert crash["s"] == "error" and "boom <script>" in crash["e"] and "RuntimeError" in crash["tb"]
    assert text[("xss-img", "hostile-bot")]["tc"] == [["lookup<b>", '{"q": "<img src=x onerror=window.__pwned=1>"}', "</script>"]]


def test_html_copy_and_report_command_reproduce_the_report(hostile_run: Path) -> None:
    original = (hostile_run / "report.html").read_bytes()
    assert (hostile_run.parents[1] / "copy.html").read_bytes() == original  # --html PATH
    out = hostile_run.parents[1] / "again.html"
    junit = hostile_run.parents[1] / "again.xml"
    # by path: no config needed
    result = CliRunner().invoke(main, ["report", str(hostile_run), "--html", str(out), "--junit", str(junit)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == original
    assert junit.read_bytes() == (hostile_run / "junit.xml").read_bytes()
    # by run id, resolved through the config's output dir; and `latest`
    config = str(hostile_run.parents[1] / "evalconfig.yaml")
    for ref in (hostile_run.name, "latest"):
        result = CliRunner().invoke(main, ["report", ref, "-c", config])
        assert result.exit_code == 0, result.output
        assert (hostile_run / "report.html").read_bytes() == original


def test_report_command_unknown_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["report", "nope", "-c", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2
    assert "is not a run directory" in result.output


def _result(case_id: str, target: str, status: str, index: int, repeat: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": "r",
        "index": index,
        "target": target,
        "dataset": "d",
        "case_id": case_id,
        "repeat": repeat,
        "category": "c",
        "status": status,
        "assertions": [{"type": "contains", "passed": status == "pass", "score": 1.0, "reason": "r"}],
        "output": {"text": f"{case_id} {target}", "events": [{"type": "text_delta", "text": "<b>"}] * 3},
        "latency_ms": 10.0 + index,
        **extra,
    }


def _write(tmp_path: Path, results: list[dict[str, Any]], baseline: dict[str, Any] | None = None) -> str:
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in results), encoding="utf-8")
    builder = SummaryBuilder("r", "n", "2026-01-01T00:00:00+00:00")
    for r in results:
        builder.add(r)
    write_html(path, builder.finish("2026-01-01T00:00:01+00:00", 1.0), tmp_path / "report.html", baseline=baseline)
    return (tmp_path / "report.html").read_text(encoding="utf-8")


def test_baseline_block_renders_deltas_and_changes(tmp_path: Path) -> None:
    results = [_result("a", "t", "pass", 0), _result("b", "t", "fail", 1)]
    baseline = {
        "run_id": "20260101-000000-abcdef",
        "pass_rate": 1.0,
        "cost_usd": None,
        "p99_ms": 5.0,
        "newly_failing": [{"target": "t", "dataset": "d", "case_id": "b<script>"}],
        "newly_passing": ["a"],
    }
    html = _write(tmp_path, results, baseline)
    page = _page_without_data(html)
    assert "Versus baseline" in page and "20260101-000000-abcdef" in page
    assert "-50.0 pts" in page and "Newly failing (1)" in page and "d/b&lt;script&gt; · t" in page
    assert _data(html)["changes"] == {"failing": [["t", "d", "b<script>"]], "passing": [[None, None, "a"]]}
    assert "Versus baseline" not in _page_without_data(_write(tmp_path, results))


def test_repeats_and_events_are_embedded(tmp_path: Path) -> None:
    results = [_result("a", "t", s, i, repeat=i) for i, s in enumerate(["pass", "fail", "pass"])]
    data = _data(_write(tmp_path, results))
    assert data["repeats"] is True
    assert [x.get("r", 0) for x in data["cells"]] == [0, 1, 2]
    assert data["cells"][0]["ev"] == ['{"type": "text_delta", "text": "<b>"}'] * 3


def test_missing_results_file_still_renders(tmp_path: Path) -> None:
    summary = SummaryBuilder("r", "n", "").finish("", 0.0)
    write_html(tmp_path / "absent.jsonl", summary, tmp_path / "out" / "report.html")
    assert "<!doctype html>" in (tmp_path / "out" / "report.html").read_text(encoding="utf-8")


# ---------------------------------------------------------------- in a real browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium()


@pytest.fixture
def report_page(hostile_run: Path, browser: Any) -> Iterator[tuple[Any, list[str], list[str]]]:
    """The hostile run's report loaded from file://, with every request and page error recorded."""
    url = (hostile_run / "report.html").resolve().as_uri()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    errors: list[str] = []
    context.on("request", lambda r: requests.append(r.url))
    # anything but the file itself is refused, so a leak could not even reach a network
    context.route(re.compile(r"^(?!file://).*"), lambda route: route.abort())
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url)
    page.wait_for_selector("#mx-body tr.row")
    yield page, requests, errors
    context.close()
    assert requests == [url], f"the report made requests: {requests}"


@pytest.mark.slow
def test_browser_runs_no_script_from_the_data_and_shows_everything(report_page: tuple[Any, list[str], list[str]]) -> None:
    page, _, errors = report_page
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert errors == []
    assert page.locator("#mx-body .cid").all_text_contents() == CASES
    assert [t.strip() for t in page.locator("#mx-head th").all_text_contents()] == ["case", *TARGETS]
    assert page.locator("#mx-body button.chip").count() == len(CASES) * len(TARGETS)
    assert page.title().startswith("hostile <script>window.__pwned=1</script>")

    def detail(case: str, target: str) -> Any:
        row = CASES.index(case)
        page.click(f'#mx-body button.chip[data-row="{row}"][data-t="{TARGETS.index(target)}"]')
        page.wait_for_selector("#detail:not([hidden])")
        return page.locator("#d-body")

    body = detail("xss-script", "hostile-bot")
    assert SCRIPT_XSS + " hello" in body.inner_text()
    assert "lookup<b>" in body.inner_text() and "<img src=x onerror=window.__pwned=1>" in body.inner_text()
    # a tool's arguments are embedded as compact JSON and shown indented
    assert '{\n  "q": "<img src=x onerror=window.__pwned=1>"\n}' in body.inner_text()
    assert page.locator("#d-body img, #d-body script, #d-body b").count() == 0
    page.keyboard.press("Escape")

    body = detail("close-script", "hostile-bot")
    assert "</script><script>window.__pwned=1</script><!-- hello" in body.inner_text()
    page.keyboard.press("Escape")

    for case, expected in (("chinese", CHINESE), ("arabic", ARABIC), ("nul", "before\u2400after hello"), ("ansi", "red hello done")):
        assert expected in detail(case, "hostile-bot").inner_text()
        page.keyboard.press("Escape")

    body = detail("huge", "hostile-bot")
    shown = len(body.locator("pre.text").nth(1).inner_text())
    assert shown < 5_000 and "clipped in this report: 200,000 characters" in body.inner_text()
    body.get_by_text("show all").click()
    assert len(body.locator("pre.text").nth(1).inner_text()) == TEXT_CAP
    page.keyboard.press("Escape")

    body = detail("crash", "hostile-bot")
    assert "RuntimeError: boom <script>window.__pwned=1</script>" in body.inner_text()
    assert "Traceback" in body.inner_text()
    assert page.evaluate("typeof window.__pwned") == "undefined"


@pytest.mark.slow
def test_browser_filters_search_and_sort(report_page: tuple[Any, list[str], list[str]], hostile_run: Path) -> None:
    from playwright.sync_api import expect

    page, _, _ = report_page
    results = read_cells(hostile_run)

    def shown() -> list[str]:
        return page.locator("#mx-body .cid").all_text_contents()

    def cases_with(predicate: Any) -> list[str]:
        hit = {r["case_id"] for r in results if predicate(r)}
        return [c for c in CASES if c in hit]

    page.select_option("#f-status", "fail")
    assert shown() == cases_with(lambda r: r["status"] == "fail")
    assert 0 < len(shown()) < len(CASES)
    assert page.locator("#mx-body button.chip.fail").count() >= len(shown())

    page.select_option("#f-target", "plain-bot")
    assert shown() == cases_with(lambda r: r["status"] == "fail" and r["target"] == "plain-bot")
    assert [t.strip() for t in page.locator("#mx-head th").all_text_contents()] == ["case", "plain-bot"]

    page.select_option("#f-status", "error")
    page.select_option("#f-target", "")
    assert shown() == ["crash"]

    page.click("#f-reset")
    page.select_option("#f-category", "i18n")
    assert shown() == ["chinese", "arabic"]
    page.select_option("#f-category", "")
    page.select_option("#f-tag", "html")
    assert shown() == ["xss-script", "xss-img"]

    page.click("#f-reset")
    page.fill("#f-q", "世界")
    expect(page.locator("#mx-body .cid")).to_have_count(1)  # the search input is debounced
    assert shown() == ["chinese"]
    page.fill("#f-q", "")
    expect(page.locator("#mx-body .cid")).to_have_count(len(CASES))

    # no repeats and no baseline in this run: those two filters are not offered
    assert not page.locator("#l-flaky").is_visible() and not page.locator("#l-changed").is_visible()

    page.select_option("#f-sort", "id")
    assert shown() == sorted(CASES)
    assert "showing" not in page.locator("#mx-count").inner_text()
    page.select_option("#f-status", "pass")
    assert page.locator("#mx-count").inner_text().startswith(f"showing {len(shown())} of {len(CASES)} cases")


# a Chromium launch; the quick tier checks the data these filters read (test_baseline_block_renders_deltas_and_changes,
# test_repeats_and_events_are_embedded)
@pytest.mark.slow
def test_browser_changed_vs_baseline_and_repeats(browser: Any, tmp_path: Path) -> None:
    results = [
        _result("a", "t", "pass", 0),
        _result("a", "t", "pass", 1, repeat=1),
        _result("b", "t", "fail", 2),
        _result("b", "t", "fail", 3, repeat=1),
        _result("c", "t", "pass", 4),
        _result("c", "t", "fail", 5, repeat=1),
    ]
    baseline = {
        "run_id": "base",
        "pass_rate": 1.0,
        "newly_failing": [{"target": "t", "dataset": "d", "case_id": "b"}],
        "newly_passing": [{"target": "t", "dataset": "d", "case_id": "c"}],
    }
    _write(tmp_path, results, baseline)
    page = browser.new_page()
    try:
        page.goto((tmp_path / "report.html").as_uri())
        page.wait_for_selector("#mx-body tr.row")
        chips = page.locator("#mx-body button.chip")
        assert [c.split()[0] for c in chips.all_inner_texts()] == ["2/2", "0/2", "1/2"]  # k/N with repeats
        assert chips.nth(2).get_attribute("class") == "chip flaky"
        page.check("#f-changed")
        assert page.locator("#mx-body .cid").all_text_contents() == ["b", "c"]
        assert "new fail" in chips.nth(0).text_content() and "fixed" in chips.nth(1).text_content()
        page.uncheck("#f-changed")
        page.check("#f-flaky")
        assert page.locator("#mx-body .cid").all_text_contents() == ["c"]
        chips.nth(0).click()
        assert page.locator("#d-body .tabs button").count() == 2  # one tab a repeat
        assert page.evaluate("typeof window.__pwned") == "undefined"
    finally:
        page.close()


def test_cost_chart_of_free_models_shows_their_tokens() -> None:
    """A local model priced at $0 is priced, yet a chart of $0 bars says nothing: its tokens are drawn instead."""
    from evalx.reports.charts import cost_per_target

    free = str(cost_per_target(["local", "other"], {"local": 0.0, "other": 0.0}, {}, {"local": 132, "other": 40}))
    assert "Tokens per target" in free and "132 tokens" in free and "every priced cell cost $0" in free
    assert "No cost or tokens recorded" not in free
    paid = str(cost_per_target(["a"], {"a": 0.5}, {}, {"a": 10}))
    assert "Cost per target" in paid and "$0.50" in paid
    assert "No cost or tokens recorded" in str(cost_per_target(["a"], {"a": 0.0}, {}, {"a": 0}))
