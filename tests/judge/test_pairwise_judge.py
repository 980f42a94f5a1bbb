"""``pairwise``: a judge compares two targets' outputs for each case, asked in both orders, after the cells ran.

A fake OpenAI-compatible judge server logs every request and answers by a
mode: by content (prefers the output that says GOOD), by position (always
"A"), or with an unreadable reply.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import FakeLLMServer
from aiohttp import web
from browser import chromium
from click.testing import CliRunner
from results_file import read_cells

from evalx import JudgeError
from evalx.cli import main
from evalx.judge.verdict import parse_preference
from evalx.reports.markdown import markdown_summary


class PairwiseJudge(FakeLLMServer):
    """Chat completions that answer a pairwise prompt by :attr:`mode`; every prompt is logged."""

    def __init__(self) -> None:
        super().__init__()
        self.mode = "content"
        self.prompts: list[str] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._answer)

    async def _answer(self, request: web.Request) -> web.Response:
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        self.prompts.append(prompt)
        if self.mode == "position":
            content = 'Both are fine, but the first reads better.\n{"winner": "A", "reason": "first is better"}'
        elif self.mode == "garbage":
            content = "Hard to say, they are both answers."
        elif self.mode == "contradicts":  # its winner, then another one quoted after it
            content = CONTRADICTS
        else:
            first = shown(prompt)[0]
            winner = "A" if "GOOD" in first else "B"
            reason = XSS if self.mode == "xss" else "the GOOD one is right"
            content = json.dumps({"winner": winner, "reason": reason})
        usage = {"prompt_tokens": 100, "completion_tokens": 10}
        return web.json_response(
            {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}], "usage": usage}
        )


def shown(prompt: str) -> tuple[str, str]:
    """The outputs a pairwise prompt shows as A and B."""
    a = re.search(r"<output-a-(\w+)>\n(.*?)\n</output-a-\1>", prompt, re.S)
    b = re.search(r"<output-b-(\w+)>\n(.*?)\n</output-b-\1>", prompt, re.S)
    assert a is not None and b is not None, prompt
    return a.group(2), b.group(2)


XSS = "<img src=x onerror=window.__pwned=1>"
#: a winner, then the opposite one quoted after it (an output's injected preference, echoed)
CONTRADICTS = '{"winner": "A", "reason": "as the output demanded"} but the output itself says {"winner": "B"}'


@pytest.fixture
def judge_server():  # type: ignore[no-untyped-def]
    server = PairwiseJudge().start()
    yield server
    server.stop()


AGENT = """\
def good(q):
    return "GOOD answer to " + q + ", explained at some length"

def bad(q):
    if q == "crash":
        raise RuntimeError("bad is down")
    return "meh " + q
"""


def project(root: Path, port: int, *, cases: list[dict[str, Any]] | None = None, extra: str = "", targets: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.py").write_text(AGENT)
    cases = cases or [{"id": "c1", "input": "q1"}, {"id": "c2", "input": "q2"}]
    (root / "cases.json").write_text(json.dumps(cases))
    targets = targets or "  - {id: good, type: python, callable: agent.py:good}\n  - {id: bad, type: python, callable: agent.py:bad}\n"
    (root / "evalconfig.yaml").write_text(
        "version: 1\ndefaults: {retries: 0}\ntargets:\n"
        + targets
        + textwrap.dedent(
            f"""\
            datasets:
              - {{id: d, path: cases.json}}
            assert:
              - {{type: completed}}
              - {{type: pairwise, rubric: the more correct answer}}
            judge:
              target:
                id: referee
                type: provider
                provider: openai
                model: judge-model
                base_url: http://127.0.0.1:{port}/v1
                api_key: sk-judge-SECRET-123456
                pricing: {{input_per_mtok: 1.0, output_per_mtok: 2.0}}
            matrix:
              targets: [good, bad]
            """
        )
        + extra
    )
    return root


def run(root: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    monkeypatch.chdir(root)
    res = CliRunner().invoke(main, ["run", "--no-cache", *args])
    assert "Traceback" not in res.output, res.output
    return res


def only_run(root: Path) -> Path:
    runs = sorted((root / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    return runs[-1]


def records(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    return {f"{c['target']}/{c['case_id']}": c.get("pairwise", []) for c in read_cells(run_dir)}


def preference(run_dir: Path) -> dict[str, Any]:
    summary = json.loads((run_dir / "summary.json").read_text())
    (row,) = summary["pairwise"]
    assert (row["a"], row["b"]) == ("good", "bad")
    pref: dict[str, Any] = row["judge_preference"]
    return pref


def test_a_matrix_run_asks_each_pair_in_both_orders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_server: PairwiseJudge) -> None:
    root = project(tmp_path / "p", judge_server.port)
    res = run(root, monkeypatch, "--matrix")
    assert res.exit_code == 0, res.output
    # the request log: per case, one prompt with good's output first and one with bad's first
    assert len(judge_server.prompts) == 4
    for q in ("q1", "q2"):
        firsts = sorted(shown(p)[0] for p in judge_server.prompts if f"{q}\n</input" in p)
        assert firsts == [f"GOOD answer to {q}, explained at some length", f"meh {q}"]
    assert all("Criterion: the more correct answer" in p for p in judge_server.prompts)

    run_dir = only_run(root)
    cells = records(run_dir)
    for key in ("good/c1", "bad/c1", "good/c2", "bad/c2"):
        (record,) = cells[key]
        assert record["winner"] == "good" and record["position_tie"] is False
        assert record["against"] == ("bad" if key.startswith("good") else "good")
        assert [o["said"] for o in record["orders"]] == ["A", "B"]
        assert record["length_diff"] > 0 and record["longer_won"] is True
        assert record["calls"] == 2 and record["cost_usd"] == pytest.approx(2 * (100e-6 + 20e-6))
    # a preference is not a failure: bad's cells still pass
    assert {c["status"] for c in read_cells(run_dir)} == {"pass"}
    assert all(a["type"] != "pairwise" for c in read_cells(run_dir) for a in c["assertions"])

    pref = preference(run_dir)
    assert pref["compared"] == 2 and pref["wins_a"] == 2 and pref["wins_b"] == pref["ties"] == 0
    assert pref["longer_won"] == 2 and pref["length_decided"] == 2 and pref["longer_won_share"] == 1.0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["judge"]["calls"] == 4
    assert summary["judge_cost_usd"] == pytest.approx(4 * 120e-6)
    assert summary["per_target"]["good"]["judge_cost_usd"] == pytest.approx(2 * 120e-6)
    # the text summary and the stored reports show the judge's preference
    text = (run_dir / "summary.txt").read_text()
    assert "judge preferred good 2 · bad 0 · ties 0" in text, text
    assert "longer answer won 2 of 2" in text
    assert "sk-judge-SECRET" not in (run_dir / "results.jsonl").read_text()


def test_a_judge_that_answers_by_position_gives_ties(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_server: PairwiseJudge) -> None:
    judge_server.mode = "position"
    root = project(tmp_path / "p", judge_server.port)
    res = run(root, monkeypatch, "--matrix")
    assert res.exit_code == 0, res.output
    assert len(judge_server.prompts) == 4
    run_dir = only_run(root)
    for cell_records in records(run_dir).values():
        (record,) = cell_records
        assert record["winner"] == "tie" and record["position_tie"] is True
        assert [o["prefers"] for o in record["orders"]] == ["good", "bad"]
        assert record["longer_won"] is None
    pref = preference(run_dir)
    assert (pref["wins_a"], pref["wins_b"], pref["ties"], pref["position_ties"]) == (0, 0, 2, 2)
    assert pref["longer_won_share"] is None
    assert "ties 2 (2 because the two orders disagreed)" in (run_dir / "summary.txt").read_text()


def test_an_unreadable_reply_is_an_error_for_the_pair_never_a_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_server: PairwiseJudge
) -> None:
    judge_server.mode = "garbage"
    root = project(tmp_path / "p", judge_server.port)
    res = run(root, monkeypatch, "--matrix")
    assert res.exit_code == 0, res.output
    run_dir = only_run(root)
    (record,) = records(run_dir)["good/c1"]
    assert record["winner"] is None and "unreadable" in record["error"]
    assert [o["reply"] for o in record["orders"]] == ["Hard to say, they are both answers."] * 2
    pref = preference(run_dir)
    assert (pref["compared"], pref["errors"], pref["wins_a"], pref["wins_b"], pref["ties"]) == (2, 2, 0, 0, 0)


def test_a_reply_naming_another_winner_after_its_own_is_an_error_never_a_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_server: PairwiseJudge
) -> None:
    judge_server.mode = "contradicts"
    root = project(tmp_path / "p", judge_server.port)
    res = run(root, monkeypatch, "--matrix")
    assert res.exit_code == 0, res.output
    run_dir = only_run(root)
    (record,) = records(run_dir)["good/c1"]
    assert record["winner"] is None and "another winner after its verdict (A, then B)" in record["error"], record
    assert [o["reply"] for o in record["orders"]] == [CONTRADICTS] * 2
    pref = preference(run_dir)
    assert (pref["compared"], pref["errors"], pref["wins_a"], pref["wins_b"], pref["ties"]) == (2, 2, 0, 0, 0)


def test_a_failed_target_cell_is_not_compared_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_server: PairwiseJudge
) -> None:
    root = project(tmp_path / "p", judge_server.port, cases=[{"id": "ok", "input": "q1"}, {"id": "down", "input": "crash"}])
    res = run(root, monkeypatch, "--matrix")
    assert res.exit_code == 1, res.output  # bad's cell errored
    assert len(judge_server.prompts) == 2  # only the case both sides answered
    run_dir = only_run(root)
    cells = records(run_dir)
    (skipped,) = cells["good/down"]
    assert skipped["winner"] is None and skipped["not_compared"] == "bad's cell errored"
    pref = preference(run_dir)
    assert (pref["compared"], pref["not_compared"], pref["wins_a"]) == (1, 1, 1)
    assert "1 not compared" in (run_dir / "summary.txt").read_text()


def test_the_cost_guard_stops_the_pairwise_judging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_server: PairwiseJudge) -> None:
    root = project(tmp_path / "p", judge_server.port, extra="")
    (root / "agent.py").write_text(
        "def good(q):\n    return {'text': 'GOOD ' + q, 'cost_usd': 0.01}\n\ndef bad(q):\n    return {'text': 'meh ' + q, 'cost_usd': 0.01}\n"
    )
    config = (
        (root / "evalconfig.yaml")
        .read_text()
        .replace("defaults: {retries: 0}", "defaults: {retries: 0, concurrency: 1, max_total_cost: 0.02}")
    )
    (root / "evalconfig.yaml").write_text(config)
    run(root, monkeypatch, "--matrix")
    assert judge_server.prompts == []  # the cells spent the budget: no pair was judged
    cells = records(run_dir := only_run(root))
    (first,) = cells["good/c1"]
    assert first["winner"] is None and first["not_compared"].startswith("not judged: spend $0.0200 reached defaults.max_total_cost")
    assert preference(run_dir)["not_compared"] == 2


def test_report_rebuilds_the_preferences_from_the_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_server: PairwiseJudge
) -> None:
    root = project(tmp_path / "p", judge_server.port)
    assert run(root, monkeypatch, "--matrix").exit_code == 0
    run_dir = only_run(root)
    before = preference(run_dir)
    (run_dir / "summary.json").unlink()
    (run_dir / "report.html").unlink()
    res = CliRunner().invoke(main, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    assert preference(run_dir) == before
    markdown = markdown_summary(json.loads((run_dir / "summary.json").read_text()))
    assert "**Judge preference**" in markdown and "| good vs bad | 2 | 0 | 0 | 0 | 0 | 0 | 2 of 2 (100.0%) |" in markdown, markdown
    html = (run_dir / "report.html").read_text()
    assert "Judge preference" in html


def test_shards_judge_their_own_pairs_and_merge_carries_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_server: PairwiseJudge
) -> None:
    cases = [{"id": f"c{i}", "input": f"q{i}"} for i in range(6)]
    root = project(tmp_path / "p", judge_server.port, cases=cases)
    shards = []
    for i in (1, 2):  # a shard holds whole cases: every pair of a case is in one shard
        assert run(root, monkeypatch, "--matrix", "--shard", f"{i}/2").exit_code == 0
        shards.append(only_run(root))
    assert len(judge_server.prompts) == 12  # 6 cases × 1 pair × 2 orders, none asked twice
    res = CliRunner().invoke(main, ["merge", *map(str, shards), "-o", str(tmp_path / "merged")])
    assert res.exit_code == 0, res.output
    pref = preference(tmp_path / "merged")
    assert (pref["compared"], pref["wins_a"], pref["calls"]) == (6, 6, 12)
    assert sum(len(r) for r in records(tmp_path / "merged").values()) == 12  # on both cells of each pair


def test_a_python_judge_sees_which_target_is_shown_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path / "p", 9, cases=[{"id": "c1", "input": "q1"}])
    (root / "judges.py").write_text(
        "import json\n\n"
        "def judge(prompt, case):\n"
        "    meta = case['metadata']['judge']\n"
        "    assert meta['kind'] == 'pairwise' and {meta['first'], meta['second']} == {'good', 'bad'}\n"
        "    return json.dumps({'winner': 'A' if meta['first'] == 'bad' else 'B', 'reason': 'bad, always'})\n"
    )
    config = (root / "evalconfig.yaml").read_text()
    config = (
        config[: config.index("judge:\n")]
        + "judge: {target: {id: referee, type: python, callable: judges.py:judge}}\nmatrix: {targets: [good, bad]}\n"
    )
    (root / "evalconfig.yaml").write_text(config)
    assert run(root, monkeypatch, "--matrix").exit_code == 0
    (record,) = records(only_run(root))["good/c1"]
    assert record["winner"] == "bad" and [o["first"] for o in record["orders"]] == ["good", "bad"]
    assert record["longer_won"] is False and [o["reason"] for o in record["orders"]] == ["bad, always"] * 2


def test_a_resumed_run_keeps_its_verdicts_and_asks_again_only_after_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_server: PairwiseJudge
) -> None:
    judge_server.mode = "garbage"
    root = project(tmp_path / "p", judge_server.port, cases=[{"id": "c1", "input": "q1"}])
    assert run(root, monkeypatch, "--matrix").exit_code == 0
    run_dir = only_run(root)
    assert len(judge_server.prompts) == 2 and preference(run_dir)["errors"] == 1
    judge_server.mode = "content"
    res = run(root, monkeypatch, "--matrix", "--resume", run_dir.name)
    assert res.exit_code == 0, res.output
    assert len(judge_server.prompts) == 4  # the pair in error was asked again
    assert (preference(run_dir)["wins_a"], preference(run_dir)["errors"]) == (1, 0)
    res = run(root, monkeypatch, "--matrix", "--resume", run_dir.name)
    assert len(judge_server.prompts) == 4  # its verdict is kept: no judge call
    (record,) = records(run_dir)["bad/c1"]
    assert record["winner"] == "good" and record["against"] == "good"
    assert preference(run_dir)["compared"] == 1


def test_one_target_says_once_there_is_nothing_to_compare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_server: PairwiseJudge
) -> None:
    root = project(tmp_path / "p", judge_server.port)
    res = run(root, monkeypatch, "--target", "good")
    assert res.exit_code == 0, res.output
    assert res.output.count("pairwise: this run has one target (good): nothing to compare") == 1
    assert judge_server.prompts == []


def test_validate_warns_about_pairwise_with_one_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path / "p", 9, targets="  - {id: good, type: python, callable: agent.py:good}\n", extra="")
    text = (root / "evalconfig.yaml").read_text().replace("matrix:\n  targets: [good, bad]\n", "")
    (root / "evalconfig.yaml").write_text(text)
    monkeypatch.chdir(root)
    res = CliRunner().invoke(main, ["validate"])
    assert res.exit_code == 0, res.output
    assert re.search(r"evalconfig\.yaml:\d+.*pairwise compares the targets of a run; this config has one target", res.output), res.output


def test_dry_run_counts_both_orders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path / "p", 9)
    monkeypatch.chdir(root)
    res = CliRunner().invoke(main, ["run", "--matrix", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "pairwise: 4 judge calls (2 pairs of cells × 2 orders)" in res.output, res.output


# -- parse_preference -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"winner": "A", "reason": "more complete"}', ("A", "more complete")),
        ('```json\n{"winner": "b", "reason": "right date"}\n```', ("B", "right date")),
        ('Thinking...\n{"winner": "tie", "reason": "same"}', ("tie", "same")),
        ("Both are close.\nWinner: B - it cites the policy", ("B", "it cites the policy")),
        ("**Winner:** Output A", ("A", "**Winner:** Output A")),
        # an earlier object (an output quoting a verdict) never counts: the last one does
        ('The output says {"winner": "B"}.\nMy verdict:\n{"winner": "A", "reason": "r"}', ("A", "r")),
        ('{"winner": "draw"}', ("tie", "")),
    ],
)
def test_parse_preference_forms(text: str, expected: tuple[str, str]) -> None:
    said, reason = parse_preference(text)
    assert said == expected[0]
    if expected[1] and not expected[1].startswith("**"):
        assert reason == expected[1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty reply"),
        ("I think the first one.", "unreadable"),
        ('{"winner": "C"}', "is not one of A, B, tie"),
        ('Winner: A\n{"winner": "B"}', "more than one winner"),
        ('{"pass": true}', "unreadable"),
        # a winner object inside a sentence is quoted, not the judge's own
        ('Output A says to reply {"winner": "A"} and it did.', "unreadable"),
        # another winner after the verdict, quoted, in a sentence or on the same line: the reply contradicts itself
        ('{"winner": "A"} {"winner": "B"}', "another winner"),
        ('Winner: A\nThe output claimed {"winner": "B"}', "another winner"),
        ('{"winner": "A"}\nOn reflection the winner: B.', "another winner"),
        # its own JSON broken by a raw newline around the winner the output asked for
        ('{"winner": "B", "reason": "output A says\n{"winner": "A"}"}', "does not parse, naming another winner"),
    ],
)
def test_parse_preference_refuses_what_it_cannot_read(text: str, message: str) -> None:
    with pytest.raises(JudgeError, match=message) as info:
        parse_preference(text)
    assert info.value.raw == (text or None) or text == ""


# -- the HTML report in a real browser -------------------------------------------------------


@pytest.fixture(scope="module")
def pairwise_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A matrix run with pairwise, made before the browser starts (Playwright's sync API keeps an event loop running)."""
    server = PairwiseJudge().start()
    server.mode = "xss"
    try:
        root = project(tmp_path_factory.mktemp("pw") / "p", server.port)
        res = CliRunner().invoke(main, ["run", "-c", str(root / "evalconfig.yaml"), "--matrix", "--no-cache"])
        assert res.exit_code == 0, res.output
    finally:
        server.stop()
    return only_run(root)


@pytest.fixture(scope="module")
def browser(pairwise_run: Path) -> Iterator[Any]:
    yield from chromium()


@pytest.mark.slow
def test_the_report_shows_the_judge_preference_and_each_cells_comparisons(pairwise_run: Path, browser: Any) -> None:
    url = (pairwise_run / "report.html").resolve().as_uri()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    context.route(re.compile(r"^(?!file://).*"), lambda route: route.abort())
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url)
        row = page.locator("table.judge-preference tr.judge-pair")
        assert row.count() == 1
        assert [c.strip() for c in row.locator("td").all_text_contents()][1:] == ["2", "0", "0", "0", "0", "0", "2 of 2 (100.0%)"]
        page.wait_for_selector("#mx-body tr.row")
        page.click('#mx-body button.chip[data-row="0"][data-t="1"]')  # bad's cell of the first case
        page.wait_for_selector("#detail:not([hidden])")
        section = page.locator("#d-body section", has_text="Pairwise judge (both orders)")
        text = section.text_content() or ""
        assert "vs good" in text and "good preferred in both orders" in text and "the longer answer won" in text
        assert section.locator("details summary").all_text_contents() == [
            "the judge's reply, good shown first",
            "the judge's reply, bad shown first",
        ]
        section.locator("details").first.locator("summary").click()
        assert XSS in (section.locator("details pre").first.text_content() or "")  # the judge's reply is text
        assert page.locator("#d-body img").count() == 0
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert errors == []
    finally:
        context.close()
