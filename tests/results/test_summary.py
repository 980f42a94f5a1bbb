"""SummaryBuilder (summary.json) and format_summary (summary.txt)."""

from __future__ import annotations

import json
import re
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from evalx import reports
from evalx.reports import format_summary
from evalx.results.summary import SummaryBuilder

RUN_ID = "20261126-101500-a1b2c3"


def result(
    case_id: str,
    status: str = "pass",
    *,
    target: str = "rules",
    index: int = 0,
    repeat: int = 0,
    category: str | None = "billing",
    difficulty: str | None = "easy",
    latency_ms: float | None = 100.0,
    ttft_ms: float | None = None,
    usage: dict[str, int] | None = None,
    cost_usd: float | None = None,
    judge_cost_usd: float | None = None,
    cached: bool = False,
    reason: str = "expected 'refund'",
    error: str | None = None,
    assertions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    if assertions is None:
        passed = {"pass": True, "fail": False, "skipped": None, "error": True}[status]
        assertions = [{"type": "contains", "name": None, "passed": passed, "score": 0.0, "reason": reason, "weight": 1.0}]
    return {
        "version": 1,
        "run_id": RUN_ID,
        "index": index,
        "target": target,
        "dataset": "golden",
        "case_id": case_id,
        "repeat": repeat,
        "category": category,
        "difficulty": difficulty,
        "tags": [],
        "status": status,
        "assertions": assertions,
        "score": None,
        "output": {"text": "out", "usage": usage or {"input_tokens": 0, "output_tokens": 0, "cache_hit_tokens": 0}},
        "latency_ms": latency_ms,
        "ttft_ms": ttft_ms,
        "cost_usd": cost_usd,
        "judge_cost_usd": judge_cost_usd,
        "cached": cached,
        "error": error,
        "traceback": None,
    }


def build(results: list[dict[str, Any]]) -> dict[str, Any]:
    builder = SummaryBuilder(RUN_ID, "support-agent", "2026-11-26T10:15:00Z")
    for r in results:
        builder.add(r)
    return dict(builder.finish("2026-11-26T10:16:01Z", 61.5))


def sample() -> list[dict[str, Any]]:
    usage = {"input_tokens": 1000, "output_tokens": 200, "cache_hit_tokens": 250}
    return [
        result("refund-policy", "pass", index=0, latency_ms=100, ttft_ms=20, usage=usage, cost_usd=0.01, cached=True),
        result("wrong-refund", "fail", index=1, latency_ms=200, ttft_ms=40, usage=usage, cost_usd=0.02),
        result("crash", "error", index=2, latency_ms=300, error="TargetTimeout: no answer within 120s", category="shipping"),
        result("needs-judge", "skipped", index=3, latency_ms=400, category="shipping", difficulty=None, judge_cost_usd=0.005),
        result(
            "refund-policy",
            "pass",
            index=4,
            target="mini",
            latency_ms=10,
            usage={"input_tokens": 500, "output_tokens": 50, "cache_hit_tokens": 0},
        ),
        result(
            "wrong-refund",
            "fail",
            index=5,
            target="mini",
            latency_ms=20,
            usage={"input_tokens": 500, "output_tokens": 50, "cache_hit_tokens": 0},
        ),
    ]


def test_public_api_is_pinned() -> None:
    assert reports.__all__ == ["format_summary", "write_html", "write_junit", "xml_safe"]


def test_layout_and_json_ready() -> None:
    summary = build(sample())
    assert next(iter(summary)) == "version" and summary["version"] == 2
    assert list(summary) == [
        "version", "run_id", "name", "started_at", "finished_at", "duration_s",
        "repeat_pass_rule", "totals", "per_target", "per_category", "per_difficulty",
        "matrix", "pairwise",
        "latency_ms", "ttft_ms", "tokens", "cache_hit_ratio",
        "cost_usd", "cost_missing_cells", "usage_unknown_cells", "truncated_cells", "judge_cost_usd",
        "cached_cells", "batched_cells", "response_cache_hit_ratio", "inconclusive_assertions",
        "inconclusive_reasons", "judge",
        "repeats", "failures", "failures_total", "slowest", "error_groups", "judge_disagreements",
    ]  # fmt: skip
    assert json.loads(json.dumps(summary, allow_nan=False)) == summary
    assert summary["run_id"] == RUN_ID and summary["duration_s"] == 61.5


def test_totals_and_pass_rate_rule() -> None:
    totals = build(sample())["totals"]
    assert {k: totals[k] for k in ("cells", "pass", "fail", "error", "skipped")} == {
        "cells": 6,
        "pass": 2,
        "fail": 2,
        "error": 1,
        "skipped": 1,
    }
    # skipped cells are inconclusive and leave the denominator; errors stay in: 2 / (6 - 1)
    assert totals["pass_rate"] == pytest.approx(0.4)
    lo, hi = totals["pass_rate_ci"]
    assert lo < 0.4 < hi and lo >= 0.0 and hi <= 1.0


def test_all_skipped_has_no_rate() -> None:
    totals = build([result("a", "skipped")])["totals"]
    assert totals["pass_rate"] is None and totals["pass_rate_ci"] is None


def test_empty_run() -> None:
    summary = build([])
    assert summary["totals"]["cells"] == 0 and summary["totals"]["pass_rate"] is None
    assert summary["latency_ms"] == {"p50": None, "p95": None, "p99": None, "mean": None, "total": None}
    assert summary["cost_usd"] is None and summary["response_cache_hit_ratio"] is None
    assert "0 cells" in format_summary(summary)


def test_groups() -> None:
    summary = build(sample())
    assert list(summary["per_target"]) == ["rules", "mini"]
    rules = summary["per_target"]["rules"]
    assert (rules["cells"], rules["pass"], rules["fail"], rules["error"], rules["skipped"]) == (4, 1, 1, 1, 1)
    assert rules["pass_rate"] == pytest.approx(1 / 3)
    assert summary["per_target"]["mini"]["pass_rate"] == 0.5
    assert list(summary["per_category"]) == ["billing", "shipping"]
    assert summary["per_category"]["shipping"]["pass_rate"] == 0.0  # 0 / (2 - 1)
    assert summary["per_category"]["billing"]["pass_rate_ci"] is not None
    assert summary["per_difficulty"]["easy"]["cells"] == 5  # the cell with no difficulty is not counted
    assert build([result("a", category=None)])["per_category"] == {"general": build([result("a")])["per_category"]["billing"]}


def test_groups_follow_matrix_order_not_completion_order() -> None:
    forward = build(sample())
    backward = build(list(reversed(sample())))
    assert list(backward["per_target"]) == ["rules", "mini"]
    assert backward["failures"] == forward["failures"]
    assert list(backward["per_category"]) == list(forward["per_category"])


def test_latency() -> None:
    summary = build(sample())
    # rules latencies 100, 200, 300, 400: p50 rank 1.5 -> 250; p99 rank 2.97 -> 397
    rules = summary["per_target"]["rules"]["latency_ms"]
    assert rules["p50"] == pytest.approx(250) and rules["p99"] == pytest.approx(397) and rules["mean"] == pytest.approx(250)
    # overall 10, 20, 100, 200, 300, 400: p50 rank 2.5 -> 150; p95 rank 4.75 -> 375
    overall = summary["latency_ms"]
    assert overall["p50"] == pytest.approx(150) and overall["p95"] == pytest.approx(375)
    assert summary["per_target"]["rules"]["ttft_ms"]["p50"] == pytest.approx(30)
    assert summary["per_target"]["mini"]["ttft_ms"]["p50"] is None


def test_latency_falls_back_to_the_trajectory_and_ignores_junk() -> None:
    r = result("a", latency_ms=None)
    r["output"]["latency_ms"] = 42.0
    junk = [result("b", latency_ms=float("nan")), result("c", latency_ms=-1), result("d") | {"latency_ms": "fast"}]
    assert build([r, *junk])["latency_ms"]["p50"] == 42.0


def test_tokens_cost_and_cache() -> None:
    summary = build(sample())
    assert summary["tokens"] == {"input": 3000, "output": 500, "cache_hit": 500}
    assert summary["cache_hit_ratio"] == pytest.approx(500 / 3000)
    assert summary["cost_usd"] == pytest.approx(0.03)
    # the two mini cells used tokens and have no price; the crashed rules cell used none
    assert summary["cost_missing_cells"] == 2
    assert summary["per_target"]["mini"]["cost_usd"] is None
    assert summary["per_target"]["rules"]["tokens"] == {"input": 2000, "output": 400, "cache_hit": 500}
    assert summary["judge_cost_usd"] == pytest.approx(0.005)
    assert summary["cached_cells"] == 1
    assert summary["response_cache_hit_ratio"] == pytest.approx(1 / 6)
    assert summary["inconclusive_assertions"] == 1


def test_cost_is_none_only_when_every_cost_is_none() -> None:
    assert build([result("a"), result("b")])["cost_usd"] is None
    assert build([result("a"), result("b", cost_usd=0.0)])["cost_usd"] == 0.0
    assert build([result("a")])["cache_hit_ratio"] is None  # no input tokens


def test_failures_list() -> None:
    failures = build(sample())["failures"]
    assert failures == [
        {
            "target": "rules",
            "dataset": "golden",
            "case_id": "wrong-refund",
            "repeat": 0,
            "category": "billing",
            "status": "fail",
            "reason": "contains: expected 'refund'",
        },
        {
            "target": "rules",
            "dataset": "golden",
            "case_id": "crash",
            "repeat": 0,
            "category": "shipping",
            "status": "error",
            "reason": "TargetTimeout: no answer within 120s",
        },
        {
            "target": "mini",
            "dataset": "golden",
            "case_id": "wrong-refund",
            "repeat": 0,
            "category": "billing",
            "status": "fail",
            "reason": "contains: expected 'refund'",
        },
    ]


def test_failure_reason_is_the_first_failing_assertion() -> None:
    assertions = [
        {"type": "completed", "name": None, "passed": True, "score": 1.0, "reason": "ok"},
        {"type": "regex", "name": "order-id", "passed": False, "score": 0.0, "reason": "no match"},
        {"type": "contains", "name": None, "passed": False, "score": 0.0, "reason": "second"},
    ]
    [failure] = build([result("a", "fail", assertions=assertions)])["failures"]
    assert failure["reason"] == "regex (order-id): no match"
    [failure] = build([result("a", "fail", assertions=[]) | {"score": 0.5}])["failures"]
    assert failure["reason"] == "score 0.500 is below the case threshold"


def test_failure_reason_of_an_assertion_that_could_not_be_evaluated() -> None:
    broken = {"type": "llm_judge", "name": None, "passed": None, "score": 0.0, "reason": "", "error": "unreadable verdict: 'maybe'"}
    [failure] = build([result("a", "error", assertions=[broken])])["failures"]
    assert failure["reason"] == "llm_judge: could not be evaluated: unreadable verdict: 'maybe'"


def test_failures_are_bounded_to_the_first_200_in_matrix_order() -> None:
    cells = [result(f"c{i}", "fail", index=i) for i in range(500)]
    summary = build(list(reversed(cells)))
    assert summary["failures_total"] == 500
    assert [f["case_id"] for f in summary["failures"]] == [f"c{i}" for i in range(200)]


def test_unknown_status_counts_as_error() -> None:
    summary = build([result("a") | {"status": None}])
    assert summary["totals"]["error"] == 1 and summary["failures_total"] == 1


def test_repeats() -> None:
    cells = []
    index = 0
    # stable passes 3/3; flaky passes 1/3 (runs pass, fail, fail)
    for case_id, outcomes in (("stable", "ppp"), ("flaky", "pff")):
        for repeat, outcome in enumerate(outcomes):
            cells.append(result(case_id, "pass" if outcome == "p" else "fail", index=index, repeat=repeat))
            index += 1
    repeats = build(cells)["repeats"]
    assert repeats["runs_per_case"] == 3 and repeats["flaky_cases"] == 1
    assert repeats["flaky"] == [{"target": "rules", "dataset": "golden", "case_id": "flaky", "passed": 1, "runs": 3, "status": "fail"}]
    rules = repeats["per_target"]["rules"]
    assert rules["k"] == 3 and rules["cases"] == 2
    # pass@1 = mean(3/3, 1/3) = 2/3; pass@3 = mean(1, 1 - C(2,3)/C(3,3) = 1) = 1;
    # pass^3 = mean(C(3,3)/C(3,3) = 1, C(1,3)/C(3,3) = 0) = 0.5
    assert rules["pass_at_1"] == pytest.approx(2 / 3)
    assert rules["pass_at_k"] == pytest.approx(1.0)
    assert rules["pass_hat_k"] == pytest.approx(0.5)
    assert build(sample())["repeats"] is None


def _many(n: int) -> Iterator[dict[str, Any]]:
    big_text = "y" * 4000  # the builder must not keep outputs
    for i in range(n):
        r = result(
            f"case-{i}",
            ("pass", "fail", "error", "skipped")[i % 4],
            target=("rules", "mini")[i % 2],
            index=i,
            category=f"c{i % 9}",
            latency_ms=float(i % 997),
            cost_usd=0.001,
        )
        r["output"]["text"] = big_text + str(i)
        yield r


@pytest.mark.slow
def test_100k_cells_in_little_memory() -> None:
    builder = SummaryBuilder(RUN_ID, "big", "now")
    tracemalloc.start()
    try:
        for r in _many(100_000):
            builder.add(r)
        held, _ = tracemalloc.get_traced_memory()
        summary = builder.finish("later", 1.0)
    finally:
        tracemalloc.stop()
    # 100,000 distinct cases: ~120 bytes a cell (latency + a per-case counter);
    # keeping the results would be > 400 MB
    assert held < 25_000_000
    assert summary["totals"]["cells"] == 100_000
    assert summary["cost_usd"] == pytest.approx(100.0)
    assert len(summary["failures"]) == 200 and summary["failures_total"] == 50_000
    assert len(json.dumps(summary)) < 200_000


# ---------------------------------------------------------------- format_summary


def test_format_header_and_tables() -> None:
    text = format_summary(build(sample()))
    lines = text.splitlines()
    assert lines[0] == f"Run {RUN_ID}  support-agent"
    # two targets: a pass rate each in the headline; the pooled 40% only in the last line's footnote (issue 15)
    assert lines[1] == "2 targets · 6 cells: 2 pass · 2 fail · 1 error · 1 skipped"
    assert lines[2] == "Pass rate per target  (skipped cells excluded):"
    assert lines[3].split() == ["rules", "33.3%", "(95%", "CI", "6.1–79.2%)", "1/3", "cells"]
    assert lines[4].split() == ["mini", "50.0%", "(95%", "CI", "9.5–90.5%)", "1/2", "cells"]
    assert "40.0%" not in "\n".join(lines[:-1])
    assert lines[-1].startswith("all targets pooled: 40.0% (95% CI ")
    header = next(line for line in lines if line.startswith("target"))
    assert header.split() == ["target", "cells", "pass", "fail", "error", "skip", "pass", "rate", "p50", "p99", "tokens", "cost"]
    rules_row = next(line for line in lines if line.startswith("rules "))
    assert rules_row.split() == ["rules", "4", "1", "1", "1", "1", "33.3%", "250ms", "397ms", "2,400", "$0.0300"]
    mini_row = next(line for line in lines if line.startswith("mini "))
    assert mini_row.split()[-1] == "unknown"  # a provider target none of whose cells could be priced: not "—", not $0
    assert any(line.split()[:2] == ["target", "category"] for line in lines)
    assert any(line.split()[:2] == ["shipping", "2"] and "0.0%" in line for line in lines)  # rules' own shipping row
    assert "\x1b" not in text


def test_format_failures_and_facts() -> None:
    text = format_summary(build(sample()))
    assert "Failed cases:\n" in text
    # a cell is named dataset/case everywhere (its category is a property, not its name)
    assert "  rules  golden/wrong-refund — contains: expected 'refund'\n" in text
    assert "  rules  golden/crash — error: TargetTimeout: no answer within 120s\n" in text
    assert "  mini   golden/wrong-refund — contains: expected 'refund'\n" in text
    assert re.search(r"^Cost +\$0\.0300 \(\+ \$0\.00500 judge\) · prices missing for 2 cells$", text, re.MULTILINE)
    assert re.search(r"^Duration +1m01\.5s$", text, re.MULTILINE)
    assert re.search(r"^Cache +1 of 6 cells from the response cache \(16\.7%\)$", text, re.MULTILINE)
    assert re.search(r"^Tokens +3,000 in · 500 out · 500 prompt-cache hits \(16\.7% of input\)$", text, re.MULTILINE)


def test_format_caps_failure_lines() -> None:
    summary = build([result(f"c{i}", "fail", index=i) for i in range(250)])
    text = format_summary(summary)
    assert text.count(" — contains:") == 30
    assert "  … and 220 more\n" in text


def test_format_is_safe_with_hostile_reasons() -> None:
    hostile = "\x1b[2J\x1b[31mgotcha\nsecond line\x00\ud800 " + "z" * 300
    text = format_summary(build([result("a", "fail", reason=hostile, category="x\x1b]0;title\x07")]))
    assert "\x1b" not in text and "\x00" not in text and "\ud800" not in text
    line = next(line for line in text.splitlines() if "gotcha" in line)
    assert "\\x1b[31mgotcha second line\\x00" in line
    assert len(line) <= 120 and line.endswith("…")


def test_format_color() -> None:
    summary = build(sample())
    colored = format_summary(summary, color=True)
    assert "\x1b[32m" in colored and "\x1b[31m" in colored
    plain = re.sub(r"\x1b\[[0-9;]*m", "", colored)
    assert plain == format_summary(summary)  # colour never changes the layout


def test_format_repeats_block() -> None:
    cells = [result("a", "pass" if r else "fail", index=r, repeat=r) for r in range(3)]
    text = format_summary(build(cells))
    assert "Repeats (up to 3 runs a case; a case passes by repeat_pass_rule: majority):" in text
    row = next(
        line for line in text.splitlines() if line.startswith("rules ") and "%" in line and "$" not in line and len(line.split()) == 10
    )
    # 2 of 3 repeats passed: the case passes by majority (1 of 1 case); Wilson 1/1 = 20.7–100%
    assert row.split() == ["rules", "1", "3", "1/1", "100.0%", "20.7–100.0%", "66.7%", "100.0%", "0.0%", "1"]
    assert "Flaky cases (passed some repeats, not all):" in text
    assert re.search(r"^  rules  golden/a  2/3  passes$", text, re.M)
    assert "Flaky cases" not in format_summary(build(cells), flaky_list=False)


def test_format_cost_formats() -> None:
    assert "Cost      $0.0123" in format_summary(build([result("a", cost_usd=0.0123)]))
    assert "$1,234.50" in format_summary(build([result("a", cost_usd=1234.5)]))
    assert "Cost      —" in format_summary(build([result("a")]))


def test_errors_shared_by_as_many_cells_are_listed_in_matrix_order_whatever_order_the_cells_ended() -> None:
    """The run adds cells as they end, `evalx report` in matrix order: both list equal error groups alike."""
    cells = [
        result(f"c{i}", "error", target=target, index=index, error="RuntimeError: boom")
        for index, (target, i) in enumerate([("one", 0), ("one", 1), ("two", 0), ("two", 1)])
    ]
    expected = [
        {"target": "one", "reason": "RuntimeError: boom", "count": 2},
        {"target": "two", "reason": "RuntimeError: boom", "count": 2},
    ]
    assert build(cells)["error_groups"] == expected
    assert build(cells[::-1])["error_groups"] == expected  # target two's cells ended first
    assert build([cells[2], cells[0], cells[1], cells[3]])["error_groups"] == expected
