"""Issue 15, "Pairwise statistics you can act on": comparable cases only, Holm's adjustment, verdicts in plain words, in full.

The end-to-end test runs ``evalx run --matrix`` through the CLI against a
scripted OpenAI-compatible server on 127.0.0.1: three models at two
temperatures, one of them a model the server does not know (HTTP 404 on every
cell). That model is "not comparable", never a loser; with 6 comparable pairs
the verdicts use Holm-adjusted p-values, which appear in full in the terminal,
``summary.txt``, ``summary.json``, the Markdown summary and the HTML report
(read in headless Chromium).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from results_file import read_cells
from scripted_server import ScriptedServer, openai_answer

from evalx.cli import main
from evalx.reports.markdown import markdown_summary
from evalx.reports.matrix_view import format_matrix
from evalx.reports.text import format_summary
from evalx.results import stats
from evalx.results.figures import p_value, usd
from evalx.results.summary import SummaryBuilder

USAGE = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
CASES = 12
#: how many of the cases q0..q11 each (model, temperature) answers right: the first N
RIGHT = {("strong", 0): 12, ("strong", 0.7): 10, ("weak", 0): 2, ("weak", 0.7): 4}
UNKNOWN = "gpt-5"


def flat(text: str) -> str:
    """``text`` with every run of blanks (wrapped lines) as one space."""
    return re.sub(r"\s+", " ", text)


def vid(model: str, temperature: float) -> str:
    return f"llm[model={model},temperature={temperature:g}]"


def brain(body: dict[str, Any]) -> Any:
    """The scripted server's answer: the right one for the first RIGHT[model, temperature] cases, 404 for gpt-5."""
    model = body["model"]
    if model == UNKNOWN:
        return 404, {
            "error": {"message": f"The model `{model}` does not exist", "type": "invalid_request_error", "code": "model_not_found"}
        }
    case = int(body["messages"][-1]["content"].removeprefix("question "))
    right = case < RIGHT[model, body.get("temperature", 0)]
    return openai_answer(f"answer-{case}" if right else "no idea", usage=USAGE)


def project(tmp_path: Path, server: ScriptedServer) -> Path:
    cases = [{"id": f"q{i}", "input": f"question {i}", "assert": [{"type": "contains", "value": f"answer-{i}"}]} for i in range(CASES)]
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\nname: pairwise\ndefaults: {retries: 0, concurrency: 4}\n"
        "targets:\n"
        f"  - {{id: llm, type: provider, provider: openai, model: strong, base_url: {json.dumps(server.url + '/llm/v1')}, "
        "api_key: sk-test-not-a-real-key-123456, pricing: {input_per_mtok: 1.0, output_per_mtok: 2.0}, params: {temperature: 0}}\n"
        f"matrix:\n  targets: [llm]\n  params:\n    model: [strong, {{value: weak, pricing: {{input_per_mtok: 1.0, output_per_mtok: 2.0}}}}, {UNKNOWN}]\n"
        "    temperature: [0, 0.7]\n"
        f"datasets:\n  - id: d\n    cases: {json.dumps(cases)}\n",
        encoding="utf-8",
    )
    return config


#: the comparable pairs, in target order: (a, b, only a passed, only b passed); the others all involve gpt-5
COMPARABLE = [
    (vid("strong", 0), vid("strong", 0.7), 2, 0),
    (vid("strong", 0), vid("weak", 0), 10, 0),
    (vid("strong", 0), vid("weak", 0.7), 8, 0),
    (vid("strong", 0.7), vid("weak", 0), 8, 0),
    (vid("strong", 0.7), vid("weak", 0.7), 6, 0),
    (vid("weak", 0), vid("weak", 0.7), 0, 2),
]
#: exact McNemar p of each comparable pair (2 · 2^-n with n discordant cases, all one way), and Holm over the 6:
#: sorted 2^-9 · 6, 2^-7 · 5, 2^-7 · 4 (kept at the running max), 2^-5 · 3, then 1 and 1
RAW = [0.5, 2**-9, 2**-7, 2**-7, 2**-5, 0.5]
HOLM = [1.0, 6 * 2**-9, 5 * 2**-7, 5 * 2**-7, 3 * 2**-5, 1.0]


@pytest.fixture(scope="module")
def matrix_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, Path, Path]:
    """``evalx run --matrix`` once for the module (before the browser starts: Playwright's loop owns the thread after)."""
    tmp_path = tmp_path_factory.mktemp("pairwise")
    server = ScriptedServer().start()
    server.answers["llm"] = brain
    try:
        config = project(tmp_path, server)
        markdown = tmp_path / "summary.md"
        result = CliRunner().invoke(main, ["run", "-c", str(config), "--matrix", "--no-cache", "--markdown", str(markdown)])
    finally:
        server.stop()
    (run_dir,) = (tmp_path / "runs").iterdir()
    return result.exit_code, result.output, run_dir, markdown


def test_a_model_that_errors_everywhere_is_not_comparable_and_p_is_holm_adjusted_everywhere(
    matrix_run: tuple[int, str, Path, Path],
) -> None:
    exit_code, terminal, run_dir, markdown = matrix_run
    assert exit_code == 3, terminal  # a target whose every cell failed makes the run incomplete (exit 3), as before
    assert f"target '{vid(UNKNOWN, 0)}': every cell failed (12): HTTP 404" in terminal
    summary = json.loads((run_dir / "summary.json").read_text())
    cells = read_cells(run_dir)
    unknown = [c for c in cells if f"model={UNKNOWN}" in c["target"]]
    assert len(unknown) == 2 * CASES and all(c["status"] == "error" and "404" in c["error"] for c in unknown)

    pairs = {(p["a"], p["b"]): p for p in summary["pairwise"]}
    assert len(pairs) == 15  # 6 variants
    # every pair with the unknown model: nothing comparable, no p-value, no winner, never a loser
    for (a, b), p in pairs.items():
        if UNKNOWN in a or UNKNOWN in b:
            assert (p["comparable"], p["not_comparable"], p["p_value"], p["p_adjusted"], p["winner"], p["conclusion"]) == (
                0, CASES, None, None, None, "not comparable",
            ), p  # fmt: skip
    assert not any(UNKNOWN in p["conclusion"] for p in summary["pairwise"])
    # the 6 comparable pairs: counts, raw and Holm-adjusted p, and verdicts from the adjusted p
    for (a, b, only_a, only_b), raw, holm in zip(COMPARABLE, RAW, HOLM, strict=True):
        p = pairs[a, b]
        assert (p["comparable"], p["not_comparable"], p["only_a"], p["only_b"]) == (CASES, 0, only_a, only_b), (a, b)
        assert (p["p_value"], p["adjustment"], p["family"]) == (raw, "holm", 6), (a, b)
        assert p["p_adjusted"] == pytest.approx(holm), (a, b)
        winner = (a if only_a > only_b else b) if holm < 0.05 else None
        assert p["winner"] == winner and p["conclusion"] == (
            f"{winner} beats {b if winner == a else a}" if winner else "no clear difference"
        )
        assert p["difference"] == pytest.approx((only_a - only_b) / CASES)
        lo, hi = p["difference_ci"]
        assert lo <= p["difference"] <= hi
    # strong at 0.7 passes 6 more cases than weak at 0.7: p = 0.03125 would be a win unadjusted; Holm over 6 pairs says 0.09375
    tight = pairs[vid("strong", 0.7), vid("weak", 0.7)]
    assert tight["p_value"] < 0.05 < tight["p_adjusted"] and tight["conclusion"] == "no clear difference"

    adjusted = [p_value(h) for h in HOLM]
    assert adjusted == ["1", "0.0117", "0.0391", "0.0391", "0.0938", "1"]
    text, md, html = (run_dir / "summary.txt").read_text(), markdown.read_text(), (run_dir / "report.html").read_text()
    assert md == markdown_summary(summary)
    for where, out in (("terminal", terminal), ("summary.txt", text), ("markdown", md)):
        assert "Holm-adjusted" in out, where
        block = out[out.index("Pairwise") :]
        for (a, b, _, _), raw, holm in zip(COMPARABLE, RAW, HOLM, strict=True):
            assert f"{a} vs {b}" in block, (where, a, b)
            assert p_value(raw) in block and p_value(holm) in block, where
    for out in (terminal, text):  # a pair's evidence, word for word, never cut (long lines wrap between words)
        words = flat(out)
        assert (
            f" {vid('strong', 0.7)} vs {vid('weak', 0.7)} → no clear difference"
            f" 12 cases comparable, 0 not comparable · {vid('strong', 0.7)} wins 6 · {vid('weak', 0.7)} wins 0 · ties 6"
            f" pass rate {vid('strong', 0.7)} 83.3% · {vid('weak', 0.7)} 33.3% · difference +50.0 pts"
        ) in words
        assert "  p = 0.0312 · Holm-adjusted p = 0.0938\n" in out
        assert f"  {vid('strong', 0)} vs {vid(UNKNOWN, 0)} → not comparable\n    0 cases comparable, 12 not comparable" in out
        block = out[out.index("Pairwise") :].split("\n\n")[0]
        assert block.endswith("\n  … and 3 more pairs, each with its adjusted p, in summary.json")
        assert "…" not in block.removesuffix("\n  … and 3 more pairs, each with its adjusted p, in summary.json")
        assert all(len(line) <= 120 for line in block.splitlines())
    assert terminal.count("Pairwise (15 pairs;") == 1  # the matrix view shows it; the summary above it does not repeat it
    assert f"| {vid('strong', 0.7)} vs {vid('weak', 0.7)} | no clear difference | 12 | 0 | 6 · 0 · 6 |" in md
    assert "| p | Holm-adjusted p |" in md

    # cost per passing cell, with significant digits: 8 tokens a cell at $1/$2 per Mtok = $0.000013 a cell
    strong, weak = summary["per_target"][vid("strong", 0)], summary["per_target"][vid("weak", 0)]
    assert strong["cost_per_pass_usd"] == pytest.approx(12 * 13e-6 / 12) and weak["cost_per_pass_usd"] == pytest.approx(12 * 13e-6 / 2)
    assert summary["per_target"][vid(UNKNOWN, 0)]["cost_per_pass_usd"] is None
    assert usd(weak["cost_per_pass_usd"]) == "$0.0000780" and "$0.0000780" in terminal and "$0.0000780" in html


@pytest.mark.slow
def test_the_html_report_shows_the_pairwise_table_and_whole_variant_headers(
    matrix_run: tuple[int, str, Path, Path],
    browser: Any,
) -> None:
    _, _, run_dir, _ = matrix_run
    summary = json.loads((run_dir / "summary.json").read_text())
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto((run_dir / "report.html").resolve().as_uri())
        page.wait_for_selector("#mx-body tr.row")
        section = page.locator("#pairwise")
        assert "Holm-adjusted over 6 pairs" in section.inner_text()
        rows = page.eval_on_selector_all(
            "#pairwise tr.pair", "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText.trim().replace(/\\s+/g, ' ')))"
        )
        by_pair = {row[0]: row for row in rows}
        assert len(rows) == 15
        for (a, b, only_a, only_b), raw, holm in zip(COMPARABLE, RAW, HOLM, strict=True):
            row = by_pair[f"{a} vs {b}"]
            assert row[2:9] == [p_value(holm), p_value(raw), "12", "0", str(only_a), str(only_b), str(CASES - only_a - only_b)]
        assert by_pair[f"{vid('strong', 0)} vs {vid(UNKNOWN, 0)}"][1:6] == ["not comparable", "—", "—", "0", "12"]
        # the decision's figures are in view without scrolling at 1280 px: the verdict and both p-values
        right = page.eval_on_selector_all("#pairwise tr.pair td.p-raw", "tds => tds.map(td => td.getBoundingClientRect().right)")
        assert max(right) <= 1280
        # the verdict names the sides A and B (the pair cell labels them), the full sentence is its title
        assert by_pair[f"{vid('strong', 0)} vs {vid('weak', 0)}"][1] == "A beats B"
        assert by_pair[f"{vid('strong', 0.7)} vs {vid('weak', 0.7)}"][1] == "no clear difference"
        title = page.locator("#pairwise tr.pair td.verdict-cell.win").first.get_attribute("title")
        assert title == f"{vid('strong', 0)} beats {vid('strong', 0.7)}" or title == f"{vid('strong', 0)} beats {vid('weak', 0)}"
        # no pairwise cell is cut: whatever a cell holds fits in it (or the table scrolls)
        clipped = page.eval_on_selector_all(
            "#pairwise td", "cells => cells.filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.innerText)"
        )
        assert clipped == []
        # the matrix column headers show every variant in full: temperature=0 and temperature=0.7 read differently
        heads = page.eval_on_selector_all(
            "#mx-head th[data-t]",
            "ths => ths.map(th => ({text: th.innerText.replace(/\\s+/g, ''), cut: th.scrollWidth > th.clientWidth + 1,"
            " parts: Array.from(th.querySelectorAll('.th-part')).filter(s => s.scrollWidth > s.clientWidth + 1).length}))",
        )
        assert [h["text"] for h in heads] == [t.replace(" ", "") for t in summary["per_target"]]
        assert len({h["text"] for h in heads}) == 6 and not any(h["cut"] or h["parts"] for h in heads)
        lines = page.eval_on_selector_all("#mx-head th[data-t] .th-param", "spans => spans.map(s => s.innerText)")
        assert lines[:2] == ["[model=strong,", "temperature=0]"] and "temperature=0.7]" in lines
    finally:
        page.close()


# ------------------------------------------------------------ the rules on summaries built in memory


def cell(target: str, case: str, status: str, index: int, cost: float | None = None) -> dict[str, Any]:
    return {
        "version": 1, "run_id": "r", "index": index, "target": target, "dataset": "d", "case_id": case, "repeat": 0,
        "category": "general", "difficulty": None, "status": status, "assertions": [], "output": {"text": "x"},
        "latency_ms": 10.0, "cost_usd": cost, "error": "boom" if status == "error" else None,
    }  # fmt: skip


def summarise(plan: dict[str, str], costs: dict[str, float] | None = None) -> dict[str, Any]:
    """``plan``: target -> one letter a case (p pass, f fail, e error, s skipped, - no cell)."""
    builder = SummaryBuilder("r", "pairwise", "now")
    index = 0
    for case in range(max(len(s) for s in plan.values())):
        for target, statuses in plan.items():
            letter = statuses[case]
            if letter != "-":
                status = {"p": "pass", "f": "fail", "e": "error", "s": "skipped"}[letter]
                builder.add(cell(target, f"c{case}", status, index, (costs or {}).get(target)))
            index += 1
    return dict(builder.finish("later", 1.0))


def test_errors_and_missing_cells_are_not_comparable_never_losses() -> None:
    # before: "A" won every case "B" errored on (p = 0.00195 with 10 errors). Now only c0..c3 are compared.
    summary = summarise({"A": "pppp" + "pppppppppp", "B": "pfff" + "eeeeesssss"})
    (pair,) = summary["pairwise"]
    assert (pair["comparable"], pair["not_comparable"], pair["only_a"], pair["only_b"], pair["ties"]) == (4, 10, 3, 0, 1)
    assert pair["p_value"] == 0.25 and pair["conclusion"] == "no clear difference" and pair["winner"] is None
    # one pair: no adjustment, said so
    assert (pair["p_adjusted"], pair["adjustment"], pair["family"]) == (0.25, "none", 1)
    assert "p = 0.25 (one pair: no adjustment)" in format_summary(summary)  # type: ignore[arg-type]
    # a case one side never ran is not comparable either
    (pair,) = summarise({"A": "ppp--", "B": "pppff"})["pairwise"]
    assert (pair["comparable"], pair["not_comparable"]) == (3, 2)


def test_holm_adjusts_over_the_comparable_pairs_and_decides_the_verdict() -> None:
    # A passes 8 cases B and C fail: raw p = 2/2^8 = 0.0078 for A vs B and A vs C; B vs C: no discordant case.
    # "D" errors everywhere: its 3 pairs are not comparable and not part of the family (3 pairs, not 6).
    summary = summarise({"A": "p" * 8, "B": "f" * 8, "C": "f" * 8, "D": "e" * 8})
    rows = {(p["a"], p["b"]): p for p in summary["pairwise"]}
    assert [(p["a"], p["b"]) for p in summary["pairwise"]] == [
        ("A", "B"), ("A", "C"), ("A", "D"), ("B", "C"), ("B", "D"), ("C", "D"),
    ]  # fmt: skip
    expected = stats.holm_adjust([2**-7, 2**-7, 1.0])
    assert expected == [3 * 2**-7, 3 * 2**-7, 1.0]
    for key, holm in zip((("A", "B"), ("A", "C"), ("B", "C")), expected, strict=True):
        assert (rows[key]["p_adjusted"], rows[key]["adjustment"], rows[key]["family"]) == (holm, "holm", 3)
    assert rows["A", "B"]["conclusion"] == "A beats B" and rows["A", "B"]["significant"]
    assert rows["B", "C"]["conclusion"] == "no clear difference"
    assert all(rows[k]["conclusion"] == "not comparable" and rows[k]["p_adjusted"] is None for k in (("A", "D"), ("B", "D"), ("C", "D")))
    text = format_summary(summary)  # type: ignore[arg-type]
    assert "Holm-adjusted over 3 pairs" in text and "p = 0.00781 · Holm-adjusted p = 0.0234" in text


def test_long_variant_names_and_p_values_are_never_cut() -> None:
    long_a = "assistant[model=a-very-long-model-name-2025-preview-with-more,temperature=0]"
    long_b = "assistant[model=a-very-long-model-name-2025-preview-with-more,temperature=0.7]"
    summary = summarise({long_a: "p" * 9, long_b: "f" * 9, "short": "ppppfffff"})
    text = format_summary(summary)  # type: ignore[arg-type]
    matrix = format_matrix(summary, [], width=80)  # type: ignore[arg-type]
    for out in (text, matrix, markdown_summary(summary)):  # type: ignore[arg-type]
        assert "…" not in out
        assert f"{long_a} vs {long_b}" in flat(out)
        for pair in summary["pairwise"]:
            assert p_value(pair["p_adjusted"]) in out and p_value(pair["p_value"]) in out
    # terminal lines wrap at 120 between words, never inside an id: a longer line is one that holds a whole id
    block = text[text.index("Pairwise") :].split("\n\n")[0]
    assert any(len(line) > 120 for line in text.splitlines())  # the per-target table is wide: the ids are whole there too
    for line in block.splitlines():
        assert len(line) <= 120 or long_a in line or long_b in line


def test_cost_per_passing_cell() -> None:
    summary = summarise({"A": "ppff", "B": "ffff", "C": "pppp"}, costs={"A": 0.000123, "B": 0.5})
    per = summary["per_target"]
    assert per["A"]["cost_per_pass_usd"] == pytest.approx(4 * 0.000123 / 2)
    assert per["B"]["cost_per_pass_usd"] is None  # no pass: no cost per pass (not infinity, not 0)
    assert per["C"]["cost_per_pass_usd"] is None  # nothing priced
    view = format_matrix(summary, [], width=200)  # type: ignore[arg-type]
    row = next(line for line in view.splitlines() if line.startswith("cost / pass"))
    assert row.split()[3:] == ["$0.000246", "—", "—"]


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (None, "—"),
        (0.0, "$0.0000"),
        (0.000123, "$0.000123"),
        (0.0000123456, "$0.0000123"),
        (0.00123456, "$0.00123"),
        (0.0099996, "$0.0100"),  # rounds up to a cent: shown as cents are
        (0.0123, "$0.0123"),
        (12.5, "$12.5000"),
        (1234.5, "$1,234.50"),
        (-0.00012, "-$0.000120"),
        (3e-15, "$3.00e-15"),
    ],
)
def test_usd_keeps_small_amounts_visible(amount: float | None, shown: str) -> None:
    assert usd(amount) == shown


def test_mcnemar_exact_sums_the_binomial_tail_exactly() -> None:
    # the tail is built term by term (C(n, i+1) from C(n, i)); it must equal the definition, bit for bit
    import math
    import random

    def definition(b: int, c: int) -> float:
        n = b + c
        return 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / (1 << n))

    rng = random.Random(15)
    pairs = [(rng.randint(0, 80), rng.randint(0, 80)) for _ in range(500)] + [(0, 0), (0, 1), (1, 0), (700, 760), (2500, 2500)]
    for b, c in pairs:
        assert stats.mcnemar_exact(b, c) == definition(b, c), (b, c)
