"""Repeats: the repeat_pass_rule, flaky cases, case-level statistics against hand-computed values, JUnit with repeats."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalx.cli import main
from evalx.reports import write_junit
from evalx.results.repeats import Tally, case_status, rule_passes
from evalx.results.summary import SummaryBuilder

RUN_ID = "20261126-101500-a1b2c3"


# --------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("passed", "decided", "all_", "majority", "any_"),
    [
        (4, 4, True, True, True),
        (3, 4, False, True, True),
        (2, 4, False, False, True),  # a tie is not a majority
        (1, 4, False, False, True),
        (0, 4, False, False, False),
        (2, 3, False, True, True),
        (0, 0, False, False, False),  # nothing decided: no verdict to pass
    ],
)
def test_rule(passed: int, decided: int, all_: bool, majority: bool, any_: bool) -> None:
    assert rule_passes(passed, decided, "all") is all_
    assert rule_passes(passed, decided, "majority") is majority
    assert rule_passes(passed, decided, "any") is any_


def test_case_status_and_flaky() -> None:
    def tally(*statuses: str) -> Tally:
        t = Tally()
        for s in statuses:
            t.add(s)
        return t

    assert case_status(tally("pass", "fail", "pass")) == "pass"
    flaky = tally("pass", "fail", "pass")
    assert flaky.flaky and flaky.runs == 3 and flaky.decided == 3
    assert case_status(tally("pass", "error", "error")) == "error"  # no repeat failed: the target broke
    assert case_status(tally("fail", "error", "pass")) == "fail"
    assert case_status(tally("skipped", "skipped")) == "skipped"
    assert case_status(tally("skipped", "pass")) == "pass" and not tally("skipped", "pass").flaky  # skipped is no evidence
    assert case_status(tally("pass", "fail"), "any") == "pass" and case_status(tally("pass", "fail"), "all") == "fail"
    with pytest.raises(ValueError):
        rule_passes(1, 1, "most")


# --------------------------------------------------------------- summary statistics, by hand


def cell(
    target: str, case_id: str, status: str, index: int, repeat: int = 0, *, category: str = "billing", difficulty: str | None = None
) -> dict[str, Any]:
    return {
        "version": 1, "run_id": RUN_ID, "index": index, "target": target, "dataset": "golden", "case_id": case_id,
        "repeat": repeat, "category": category, "difficulty": difficulty, "status": status,
        "assertions": [{"type": "contains", "passed": status == "pass", "reason": "expected 'x'"}] if status in ("pass", "fail") else [],
        "output": {"text": f"{target} says {case_id} #{repeat}"}, "latency_ms": 10.0, "cost_usd": None,
        "error": "TargetTimeout: too slow" if status == "error" else None,
    }  # fmt: skip


def summarise(results: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    builder = SummaryBuilder(RUN_ID, "repeats", "now", **kw)
    for r in results:
        builder.add(r)
    return builder.finish("later", 1.0)


def repeated(target: str, outcomes: dict[str, str], start: int = 0, **kw: Any) -> list[dict[str, Any]]:
    """Cells from {case: "ppfp"} strings (p pass, f fail, e error, s skipped), one char a repeat."""
    names = {"p": "pass", "f": "fail", "e": "error", "s": "skipped"}
    out = []
    for case_id, runs in outcomes.items():
        for r, o in enumerate(runs):
            out.append(cell(target, case_id, names[o], start + len(out), r, **kw))
    return out


def test_case_level_pass_rate_and_wilson_interval() -> None:
    # 4 cases × 4 repeats: 4/4, 3/4, 2/4, 1/4 → by majority the first two pass (2 of 4 is a tie: a fail)
    results = repeated("bot", {"a": "pppp", "b": "pppf", "c": "ppff", "d": "pfff"})
    summary = summarise(results)
    level = summary["per_target"]["bot"]["case_level"]
    assert (level["cases"], level["pass"], level["fail"], level["flaky"]) == (4, 2, 2, 3)
    assert level["pass_rate"] == 0.5
    # cell level: 10 of 16 cells passed; the interval there is Wilson (10, 16)
    assert summary["per_target"]["bot"]["pass_rate"] == pytest.approx(10 / 16)
    # with "any", 4 of 4 cases pass; with "all", 1 of 4
    assert summarise(results, repeat_pass_rule="any")["per_target"]["bot"]["case_level"]["pass"] == 4
    strict = summarise(results, repeat_pass_rule="all")
    assert strict["per_target"]["bot"]["case_level"]["pass"] == 1 and strict["repeat_pass_rule"] == "all"
    # the case-level interval: 3 of 4 cases pass
    three_of_four = summarise(repeated("bot", {"a": "pppp", "b": "pppp", "c": "pppp", "d": "ffff"}))
    lo, hi = three_of_four["per_target"]["bot"]["case_level"]["pass_rate_ci"]
    # Wilson for k = 3, n = 4, z = 1.959964 (z² = 3.841459):
    #   p = 0.75; denominator = 1 + z²/n = 1.960365
    #   centre = (p + z²/2n) / denominator = (0.75 + 0.480182) / 1.960365 = 0.627527
    #   half = z·sqrt(p(1−p)/n + z²/4n²) / denominator = 1.959964 · sqrt(0.046875 + 0.060023) / 1.960365 = 0.326885
    #   interval = 0.627527 ∓ 0.326885 = [0.300642, 0.954412]
    assert lo == pytest.approx(0.300642, abs=1e-6) and hi == pytest.approx(0.954412, abs=1e-6)


def test_pass_at_k_and_pass_hat_k_per_case() -> None:
    summary = summarise(repeated("bot", {"a": "ppff", "b": "pppp", "c": "ffff"}))
    repeats = summary["repeats"]
    rows = {r["case_id"]: r for r in repeats["cases"]}
    # k = 4 (every case ran 4 times); case a: n = 4, c = 2
    #   pass@4 = 1 − C(n−c, k)/C(n, k) = 1 − C(2, 4)/C(4, 4) = 1 − 0/1 = 1
    #   pass^4 = C(c, k)/C(n, k) = C(2, 4)/1 = 0
    assert (rows["a"]["passed"], rows["a"]["runs"], rows["a"]["pass_at_k"], rows["a"]["pass_hat_k"]) == (2, 4, 1.0, 0.0)
    assert rows["a"]["flaky"] and rows["a"]["status"] == "fail" and not rows["b"]["flaky"]
    bot = repeats["per_target"]["bot"]
    # pass@1 = mean(2/4, 4/4, 0/4) = 0.5; pass@4 = mean(1, 1, 0) = 2/3; pass^4 = mean(0, 1, 0) = 1/3
    assert bot["pass_at_1"] == pytest.approx(0.5)
    assert bot["pass_at_k"] == pytest.approx(2 / 3)
    assert bot["pass_hat_k"] == pytest.approx(1 / 3)
    # the unbiased estimator with k below n: a case with n = 4, c = 2 and k = 2 (the k every case reached)
    short = summarise(repeated("bot", {"a": "ppff", "b": "pf"}))["repeats"]["per_target"]["bot"]
    # case a: pass@2 = 1 − C(2,2)/C(4,2) = 1 − 1/6 = 5/6; pass^2 = C(2,2)/C(4,2) = 1/6
    # case b: n = 2, c = 1: pass@2 = 1 − C(1,2)/C(2,2) = 1; pass^2 = C(1,2)/1 = 0
    assert short["k"] == 2
    assert short["pass_at_k"] == pytest.approx((5 / 6 + 1) / 2)
    assert short["pass_hat_k"] == pytest.approx((1 / 6 + 0) / 2)


def test_pairwise_mcnemar_exact() -> None:
    # 11 cases: both pass 3, only A 0, only B 6, both fail 2
    a = {f"c{i}": s for i, s in enumerate("ppp" + "ffffff" + "ff")}
    b = {f"c{i}": s for i, s in enumerate("ppp" + "pppppp" + "ff")}
    results = repeated("A", a) + repeated("B", b, start=100)
    (pair,) = summarise(results)["pairwise"]
    # discordant pairs: b = 0 (only A), c = 6 (only B); under "no difference" each is a fair coin:
    # p = 2 · P(X ≤ 0), X ~ Binomial(6, ½) = 2 · 1/64 = 0.03125 < 0.05 → B beats A
    ci = pair.pop("difference_ci")
    assert pair == {
        "a": "A", "b": "B", "comparable": 11, "not_comparable": 0,
        "both_pass": 3, "only_a": 0, "only_b": 6, "both_fail": 2, "ties": 5,
        "pass_rate_a": 3 / 11, "pass_rate_b": 9 / 11, "difference": -6 / 11,
        "p_value": 0.03125, "p_adjusted": 0.03125, "adjustment": "none", "family": 1,
        "significant": True, "winner": "B", "conclusion": "B beats A",
    }  # fmt: skip
    # Newcombe's paired interval of A − B (method 10), unadjusted: inside [-1, 1], around −6/11, excluding 0
    assert ci == pytest.approx([-0.7614, -0.1346], abs=1e-4)
    # one discordant pair fewer: p = 2 · 1/32 = 0.0625 → no claim
    b["c8"] = "f"
    (pair,) = summarise(repeated("A", a) + repeated("B", b, start=100))["pairwise"]
    assert (pair["only_b"], pair["p_value"], pair["winner"], pair["conclusion"]) == (5, 0.0625, None, "no clear difference")
    # both ways: only A 2, only B 9 → p = 2 · (C(11,0) + C(11,1) + C(11,2)) / 2^11 = 2 · 67/2048 = 0.0654296875
    a2 = {f"c{i}": s for i, s in enumerate("pp" + "fffffffff")}
    b2 = {f"c{i}": s for i, s in enumerate("ff" + "ppppppppp")}
    (pair,) = summarise(repeated("A", a2) + repeated("B", b2, start=100))["pairwise"]
    assert (pair["only_a"], pair["only_b"], pair["p_value"]) == (2, 9, 0.0654296875)


def test_pairwise_uses_case_verdicts_and_skips_undecided() -> None:
    # with repeats the comparison is over case verdicts: A's 3/4 counts as a pass (majority), B's 2/4 as a fail
    results = repeated("A", {"x": "pppf", "y": "ssss"}) + repeated("B", {"x": "ppff", "y": "pppp"}, start=100)
    (pair,) = summarise(results)["pairwise"]
    assert (pair["comparable"], pair["not_comparable"], pair["only_a"], pair["only_b"]) == (1, 1, 1, 0)  # y: A was inconclusive


def test_categories_and_difficulties_at_case_level() -> None:
    results = repeated("bot", {"a": "ppp", "b": "pff"}, category="billing", difficulty="easy")
    results += repeated("bot", {"c": "fff"}, start=10, category="shipping", difficulty="hard")
    summary = summarise(results)
    billing = summary["per_category"]["billing"]
    assert billing["cells"] == 6 and billing["case_level"]["cases"] == 2 and billing["case_level"]["pass"] == 1
    assert billing["case_level"]["flaky"] == 1
    assert summary["per_difficulty"]["hard"]["case_level"]["fail"] == 1
    assert summary["totals"]["case_level"]["cases"] == 3


def test_latency_and_cost_distributions() -> None:
    results = []
    for i, (latency, cost) in enumerate(((100.0, 0.01), (200.0, 0.02), (300.0, None), (400.0, 0.03))):
        r = cell("bot", f"c{i}", "pass", i)
        r["latency_ms"], r["cost_usd"] = latency, cost
        results.append(r)
    bot = summarise(results)["per_target"]["bot"]
    # latencies 100..400: p50 at rank 1.5 → 250; p95 at rank 2.85 → 385; total 1000
    assert bot["latency_ms"]["p50"] == 250 and bot["latency_ms"]["p95"] == pytest.approx(385) and bot["latency_ms"]["total"] == 1000
    # costs of the 3 priced cells: 0.01, 0.02, 0.03 → p50 0.02, mean 0.02, total 0.06
    stats = bot["cost_usd_stats"]
    assert stats["cells"] == 3 and stats["p50"] == pytest.approx(0.02) and stats["total"] == pytest.approx(0.06)


# --------------------------------------------------------------- JUnit with repeats


def write(tmp_path: Path, results: list[dict[str, Any]], rule: str = "majority") -> tuple[Path, ET.Element]:
    path = tmp_path / "junit.xml"
    write_junit(results, path, name="repeats", run_id=RUN_ID, repeat_pass_rule=rule)
    return path, ET.parse(path).getroot()


def junit_results() -> list[dict[str, Any]]:
    return repeated("bot", {"steady": "pppp", "flaky-pass": "pfpe", "flaky-fail": "fpff", "down": "eeee", "unknown": "ssss", "once": "p"})


def test_junit_one_testcase_per_case_valid_against_the_xsd(tmp_path: Path, junit_schema: Any) -> None:
    path, root = write(tmp_path, junit_results())
    junit_schema.validate(str(path))
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert list(cases) == ["steady", "flaky-pass", "flaky-fail", "down", "unknown", "once"]
    assert root.get("tests") == "6" and root.find("testsuite").get("tests") == "6"  # type: ignore[union-attr]
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("2", "1", "1")  # p f p e is a tie: a fail
    rule = suite.find("properties/property[@name='repeat_pass_rule']")
    assert rule is not None and rule.get("value") == "majority"

    assert [child.tag for child in cases["steady"]] == ["system-out"]
    # the case's category first (issue 15: it left the classname), then the repeats
    assert cases["steady"].findtext("system-out", "").startswith("category: billing\n\n4 of 4 repeats passed (repeat_pass_rule: majority)")


def test_junit_flaky_pass_carries_flaky_failures(tmp_path: Path, junit_schema: Any) -> None:
    results = repeated("bot", {"wobbly": "pfpep"})  # 3 of 5 pass: a majority
    path, root = write(tmp_path, results)
    junit_schema.validate(str(path))
    case = root.find("testsuite/testcase")
    assert case is not None
    assert [child.tag for child in case] == ["flakyFailure", "flakyError", "system-out"]
    flaky_failure, flaky_error = case[0], case[1]
    assert flaky_failure.get("type") == "AssertionFailed" and flaky_failure.get("message") == "repeat 1: expected 'x'"
    assert flaky_failure.find("stackTrace") is not None and flaky_failure.findtext("system-out") == "bot says wobbly #1"
    assert flaky_error.get("message") == "repeat 3: TargetTimeout: too slow" and flaky_error.get("type") == "TargetTimeout"
    assert case.findtext("system-out", "").startswith(
        "category: billing\n\n3 of 5 repeats passed (repeat_pass_rule: majority)\nrepeat 0: pass\nrepeat 1: fail: expected 'x'"
    )
    assert root.get("failures") == "0" and root.get("errors") == "0"
    # under "all" the same repeats fail: one <failure> for the first failing repeat, a <rerunFailure>/<rerunError> for the others
    path, root = write(tmp_path, results, rule="all")
    junit_schema.validate(str(path))
    case = root.find("testsuite/testcase")
    assert case is not None
    assert [child.tag for child in case] == ["failure", "rerunError", "system-out"]
    assert case[0].get("message") == "3 of 5 repeats passed (repeat_pass_rule: all); repeat 1: expected 'x'"
    assert root.get("failures") == "1" and root.get("tests") == "1"


def test_junit_failing_and_erroring_cases(tmp_path: Path, junit_schema: Any) -> None:
    path, root = write(tmp_path, junit_results())
    cases = {c.get("name"): c for c in root.iter("testcase")}
    # p f p e: 2 of 4 — not a majority; a repeat failed, so the case is a failure
    assert [child.tag for child in cases["flaky-pass"]] == ["failure", "rerunError", "system-out"]
    # f p f f: 1 of 4
    fail = cases["flaky-fail"]
    assert [child.tag for child in fail] == ["failure", "rerunFailure", "rerunFailure", "system-out"]
    assert fail[0].get("message", "").startswith("1 of 4 repeats passed (repeat_pass_rule: majority); repeat 0: ")
    # every repeat errored: an error, never a failure
    assert [child.tag for child in cases["down"]] == ["error", "rerunError", "rerunError", "rerunError", "system-out"]
    assert cases["unknown"][0].tag == "skipped"
    assert cases["unknown"][0].get("message", "").startswith("all 4 repeats inconclusive")
    # a single run is written as before: no counts, no rerun elements
    assert [child.tag for child in cases["once"]] == ["system-out"]
    assert cases["once"].findtext("system-out") == "category: billing\n\nbot says once #0"
    assert root.get("failures") == "2" and root.get("errors") == "1"


def test_junit_rejects_an_unknown_rule(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write(tmp_path, junit_results(), rule="mostly")


# --------------------------------------------------------------- a flaky Python target, end to end

FLAKY_AGENT = """\
import threading
from collections import Counter

_calls = Counter()
_lock = threading.Lock()


def answer(question, case):
    # "wobbly" is right on the first 3 of every 4 calls; the other cases always.
    # Counting calls per case (not by repeat index) makes 3/4 hold in any order.
    with _lock:
        n = _calls[case["id"]]
        _calls[case["id"]] += 1
    if case["id"] == "wobbly" and n % 4 == 3:
        return "no"
    return "yes"
"""


def flaky_project(tmp_path: Path, rule: str | None = None) -> Path:
    (tmp_path / "agent.py").write_text(FLAKY_AGENT)
    defaults = "defaults: {repeat: 4, concurrency: 3" + (f", repeat_pass_rule: {rule}" if rule else "") + "}\n"
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\nname: flaky\n"
        + defaults
        + textwrap.dedent(
            """\
            targets: [{id: bot, type: python, callable: agent.py:answer}]
            datasets:
              - id: qa
                cases:
                  - {id: steady, input: q1, assert: [{type: equals, value: "yes"}]}
                  - {id: wobbly, input: q2, assert: [{type: equals, value: "yes"}]}
            """
        ),
        encoding="utf-8",
    )
    return config


def run_project(config: Path) -> tuple[int, str, dict[str, Any], Path]:
    res = CliRunner().invoke(main, ["run", "-c", str(config), "-v"])  # -v: the full summary lists flaky cases
    (run_dir,) = (config.parent / "runs").iterdir()
    return res.exit_code, res.output, json.loads((run_dir / "summary.json").read_text()), run_dir


def test_a_flaky_python_target_is_detected(tmp_path: Path, junit_schema: Any) -> None:
    code, out, summary, run_dir = run_project(flaky_project(tmp_path))
    assert summary["repeats"]["flaky"] == [
        {"target": "bot", "dataset": "qa", "case_id": "wobbly", "passed": 3, "runs": 4, "status": "pass"}
    ]
    assert summary["repeats"]["per_target"]["bot"]["flaky_cases"] == 1
    assert "Flaky cases (passed some repeats, not all):" in out and "  bot  qa/wobbly  3/4  passes" in out
    # the case passes by majority, so nothing failed: exit 0 even though one cell failed
    assert summary["totals"]["fail"] == 1 and summary["totals"]["case_level"]["fail"] == 0
    assert code == 0
    junit_schema.validate(str(run_dir / "junit.xml"))
    junit = ET.parse(run_dir / "junit.xml").getroot()
    assert junit.get("tests") == "2" and len(junit.findall(".//flakyFailure")) == 1


def test_repeat_pass_rule_all_fails_the_flaky_case(tmp_path: Path) -> None:
    code, _, summary, run_dir = run_project(flaky_project(tmp_path, rule="all"))
    assert summary["repeat_pass_rule"] == "all" and summary["totals"]["case_level"]["fail"] == 1
    assert code == 1
    junit = ET.parse(run_dir / "junit.xml").getroot()
    assert junit.get("failures") == "1" and junit.find(".//property[@name='repeat_pass_rule']").get("value") == "all"  # type: ignore[union-attr]


def test_re_rendering_a_run_keeps_its_rule(tmp_path: Path) -> None:
    from evalx.reports.render import rebuild_reports

    _, _, summary, run_dir = run_project(flaky_project(tmp_path, rule="all"))
    (run_dir / "junit.xml").unlink()
    rebuilt = rebuild_reports(run_dir)
    assert rebuilt["repeat_pass_rule"] == "all" and rebuilt["totals"]["case_level"] == summary["totals"]["case_level"]
    assert ET.parse(run_dir / "junit.xml").getroot().get("failures") == "1"
