"""The built-in assertion types, run through the evaluator as a config would run them."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from evalx import Case, ToolCall, Trajectory, Usage, Verdict
from evalx.assertions import AssertionContext, assertion, cell_status, get_assertion
from evalx.assertions import registry as _registry
from evalx.assertions.deterministic import parse_path
from evalx.assertions.evaluate import evaluate_one


def make_ctx(text: str = "", expected: Any = None, config_dir: Path | None = None, judge: Any = None, **output: Any) -> AssertionContext:
    ctx = AssertionContext(case=Case(id="c", input="q", expected=expected), output=Trajectory(text=text, **output), judge=judge)
    if config_dir is not None:
        ctx.config_dir = config_dir
    return ctx


def check(spec: dict[str, Any], text: str = "", expected: Any = None, **output: Any) -> dict[str, Any]:
    """Evaluate one assertion spec over an output, as a run would."""
    ctx = output.pop("ctx", None) or make_ctx(text, expected, **output)
    return asyncio.run(evaluate_one(spec, ctx))


def passes(spec: dict[str, Any], text: str = "", expected: Any = None, **output: Any) -> bool | None:
    result = check(spec, text, expected, **output)
    assert "error" not in result, result
    return result["passed"]


# -- equals ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "output",
    ["Paris", "paris", "  PARIS.  ", '"Paris"', "**Paris**", "Paris!", "'paris'"],
)
def test_equals_normalises(output: str) -> None:
    assert passes({"type": "equals", "value": "Paris"}, output)


def test_equals_collapses_whitespace_and_fails_on_different_text() -> None:
    assert passes({"type": "equals", "value": "New York"}, "new\n  york")
    result = check({"type": "equals", "value": "Paris"}, "The capital is Paris")
    assert result["passed"] is False and result["score"] == 0.0
    assert result["reason"] == "expected 'Paris', got 'The capital is Paris'"


def test_equals_defaults_to_expected() -> None:
    assert passes({"type": "equals"}, "Lyon", expected="lyon")
    assert passes({"type": "equals"}, "Lyon", expected="Paris") is False


def test_equals_non_string_expected() -> None:
    assert passes({"type": "equals"}, "4", expected=4)
    assert passes({"type": "equals"}, "4.0", expected=4)
    assert passes({"type": "equals"}, "True", expected=True)
    assert passes({"type": "equals"}, '{"b": [1, 2], "a": 1}', expected={"a": 1, "b": [1, 2]})
    assert passes({"type": "equals"}, '{"a": 2}', expected={"a": 1}) is False
    assert passes({"type": "equals"}, "1", expected=True) is False  # JSON 1 is not true


def test_value_missing_everywhere_is_an_assertion_error() -> None:
    result = check({"type": "equals"}, "x")
    assert result["passed"] is None
    assert "no 'value' given and the case has no 'expected'" in result["error"]
    assert cell_status([result]) == ("error", None)


# -- substring types --------------------------------------------------------------


def test_contains() -> None:
    assert passes({"type": "contains", "value": "Paris"}, "It is Paris.")
    assert passes({"type": "contains", "value": "paris"}, "It is Paris.") is False
    assert passes({"type": "contains", "value": 42}, "the answer is 42")
    assert passes({"type": "contains"}, "in Rome", expected="Rome")


def test_contains_reason_truncates_long_output() -> None:
    result = check({"type": "contains", "value": "zebra"}, "word " * 100)
    assert result["passed"] is False
    assert result["reason"].startswith("expected to contain 'zebra' (case-sensitive), got 'word word")
    assert result["reason"].endswith("...'")
    assert len(result["reason"]) < 150


def test_icontains() -> None:
    assert passes({"type": "icontains", "value": "PARIS"}, "it is paris")
    assert passes({"type": "icontains", "value": "Rome"}, "it is paris") is False


def test_starts_with() -> None:
    assert passes({"type": "starts_with", "value": "Yes"}, "  Yes, it is.")
    assert passes({"type": "starts_with", "value": "Yes"}, "No. Yes.") is False


def test_regex_and_flags() -> None:
    assert passes({"type": "regex", "value": r"\d{3}-\d{4}"}, "call 555-1234")
    assert passes({"type": "regex", "value": r"^paris$"}, "PARIS") is False
    assert passes({"type": "regex", "value": r"^paris$", "flags": "i"}, "PARIS")
    assert passes({"type": "regex", "value": r"^b$", "flags": "m"}, "a\nb\nc")
    assert passes({"type": "regex", "value": r"a.b", "flags": "s"}, "a\nb")


def test_regex_bad_pattern_or_flag_is_an_error() -> None:
    assert "error" in check({"type": "regex", "value": "("}, "x")
    assert "unknown regex flag 'q'" in check({"type": "regex", "value": "x", "flags": "q"}, "x")["error"]


def test_contains_all_scores_the_fraction_found() -> None:
    assert passes({"type": "contains_all", "values": ["a", "b"]}, "a and b")
    result = check({"type": "contains_all", "values": ["Paris", "Rome", "Oslo", "Bern"]}, "Paris and Rome")
    assert result["passed"] is False
    assert result["score"] == 0.5
    assert "'Oslo'" in result["reason"] and "'Bern'" in result["reason"]


def test_contains_all_defaults_to_expected_list() -> None:
    assert passes({"type": "contains_all"}, "x y", expected=["x", "y"])
    assert "not a list" in check({"type": "contains_all"}, "x y", expected="x")["error"]


def test_contains_any() -> None:
    assert passes({"type": "contains_any", "values": ["Oslo", "Paris"]}, "Paris")
    result = check({"type": "contains_any", "values": ["Oslo", "Bern"]}, "Paris")
    assert result["passed"] is False and result["score"] == 0.0


def test_keywords_are_whole_words_any_case() -> None:
    assert passes(
        {"type": "keywords", "values": ["photosynthesis", "Sunlight", "carbon dioxide"]},
        "Sunlight and CARBON\nDIOXIDE drive photosynthesis.",
    )
    result = check({"type": "keywords", "values": ["cat", "dog", "bird", "fish"]}, "A category of dogs, a bird, a fish.")
    assert result["passed"] is False
    assert result["score"] == 0.5  # "category" is not the word "cat", nor "dogs" "dog"
    assert result["reason"] == "missing keywords 'cat', 'dog' (2/4 found)"


# -- numeric_close ----------------------------------------------------------------


def test_numeric_close_passes_within_one_percent() -> None:
    assert passes({"type": "numeric_close", "value": 100}, "about 100.9 units")
    assert passes({"type": "numeric_close", "value": 100}, "about 101.5 units") is False
    assert passes({"type": "numeric_close", "value": 4}, "4.04")  # exactly at the edge


def test_numeric_close_reason_lists_what_it_saw_and_ignores_years() -> None:
    result = check({"type": "numeric_close"}, "In 2024 it was 5.", expected=4)
    assert result["passed"] is False
    assert result["reason"] == "expected 4 (\u00b11%), found [2024 ignored, 5]"


def test_numeric_close_year_counts_when_expected_is_a_year() -> None:
    assert passes({"type": "numeric_close", "value": 2024}, "It happened in 2024.")
    assert passes({"type": "numeric_close", "value": 2024, "tolerance": 0}, "In 2023.") is False


def test_numeric_close_commas_currency_percent_negative() -> None:
    assert passes({"type": "numeric_close", "value": 1234.5}, "Total: 1,234.5 items")
    assert passes({"type": "numeric_close", "value": "1,234,567"}, "about 1,234,567")
    assert passes({"type": "numeric_close", "value": 49.99}, "It costs $49.99.")
    assert passes({"type": "numeric_close", "value": 12}, "growth was 12% in 2025")
    assert passes({"type": "numeric_close", "value": -3.5}, "the change was -3.5 points")
    assert passes({"type": "numeric_close", "value": -4}, "gpt-4 is a model") is False  # a hyphen is not a sign
    assert passes({"type": "numeric_close", "value": 2021}, "2020-2021")


def test_numeric_close_any_number_may_match() -> None:
    assert passes({"type": "numeric_close", "value": 7}, "3 plus 4 is 7")


def test_numeric_close_absolute_tolerance() -> None:
    assert passes({"type": "numeric_close", "value": 0, "abs_tolerance": 0.1}, "0.05")
    assert passes({"type": "numeric_close", "value": 10, "abs_tolerance": 0.5}, "10.4")
    assert passes({"type": "numeric_close", "value": 10, "tolerance": 0.2}, "11.9")


def test_numeric_close_no_numbers_and_bad_expected() -> None:
    result = check({"type": "numeric_close", "value": 3}, "no idea")
    assert result["passed"] is False and "found no number" in result["reason"]
    assert "expected a number" in check({"type": "numeric_close", "value": "lots"}, "3")["error"]


# -- JSON ---------------------------------------------------------------------------


def test_is_json() -> None:
    assert passes({"type": "is_json"}, '{"a": 1}')
    assert passes({"type": "is_json"}, 'Here you go:\n```json\n{"a": 1}\n```\n')
    result = check({"type": "is_json"}, "{a: 1}")
    assert result["passed"] is False and result["reason"].startswith("not JSON")


_PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name"],
}


def test_json_schema() -> None:
    assert passes({"type": "json_schema", "schema": _PERSON}, '{"name": "Ada", "tags": ["x"]}')
    result = check({"type": "json_schema", "schema": _PERSON}, '{"name": "Ada", "tags": ["x", 3]}')
    assert result["passed"] is False
    assert result["reason"] == "$.tags[1]: 3 is not of type 'string'"
    assert check({"type": "json_schema", "schema": _PERSON}, "{}")["reason"] == "$: 'name' is a required property"
    assert passes({"type": "json_schema", "schema": _PERSON}, "not json") is False


def test_json_schema_broken_schema_is_an_error() -> None:
    assert "error" in check({"type": "json_schema", "schema": {"type": "nonsense"}}, "{}")


def test_json_path() -> None:
    doc = '{"a": {"b": [{"c": 1}, {"c": true}]}, "k.d": null}'
    assert passes({"type": "json_path", "path": "a.b[0].c"}, doc)
    assert passes({"type": "json_path", "path": "a.b[0].c", "value": 1}, doc)
    assert passes({"type": "json_path", "path": "$.a.b[-1].c", "value": True}, doc)
    assert passes({"type": "json_path", "path": '["k.d"]', "value": None}, doc)
    assert passes({"type": "json_path", "path": "a.b[1].c", "value": 1}, doc) is False  # true is not 1
    missing = check({"type": "json_path", "path": "a.b[5].c"}, doc)
    assert missing["passed"] is False and missing["reason"] == "a.b[5].c not found (nothing at $.a.b[5])"
    wrong = check({"type": "json_path", "path": "a.b[0].c", "value": 2}, doc)
    assert wrong["reason"] == "a.b[0].c: expected '2', got '1'"


def test_parse_path() -> None:
    assert parse_path("a.b[0].c") == ["a", "b", 0, "c"]
    assert parse_path("$.x['y z'][-1]") == ["x", "y z", -1]
    with pytest.raises(ValueError):
        parse_path("a..b")
    with pytest.raises(ValueError):
        parse_path("$")


# -- python -------------------------------------------------------------------------


_CHECKS = """
from evalx import Verdict

def is_short(output, ctx):
    return len(output) < 10

def half(output, ctx):
    return 0.5

def as_dict(output, ctx):
    return {"pass": "ok" in output, "score": 0.8, "reason": "looked for ok"}

def with_config(output, ctx, config):
    return output == config["want"]

def verdict(output, ctx):
    return Verdict.inconclusive("cannot tell")

async def later(output, ctx):
    return ctx.expected == output

def bad(output, ctx):
    return "yes"
"""


@pytest.fixture
def checks_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "mychecks.py").write_text(_CHECKS)
    (tmp_path / "evalx_test_modchecks.py").write_text(_CHECKS)
    # the python type puts config_dir on sys.path; undo that after the test
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "evalx_test_modchecks", raising=False)
    return tmp_path


def test_python_file_callable(checks_dir: Path) -> None:
    def run(spec: dict[str, Any], text: str, expected: Any = None) -> dict[str, Any]:
        return check({"type": "python", **spec}, ctx=make_ctx(text, expected, config_dir=checks_dir))

    assert run({"callable": "checks/mychecks.py:is_short"}, "tiny")["passed"] is True
    assert run({"callable": "checks/mychecks.py:is_short"}, "far too long an answer")["passed"] is False
    assert run({"callable": "checks/mychecks.py:half"}, "x")["passed"] is True
    assert run({"callable": "checks/mychecks.py:half", "threshold": 0.6}, "x")["passed"] is False
    as_dict = run({"callable": "checks/mychecks.py:as_dict"}, "not good")
    assert (as_dict["passed"], as_dict["score"], as_dict["reason"]) == (False, 0.8, "looked for ok")
    assert run({"callable": "checks/mychecks.py:with_config", "config": {"want": "hi"}}, "hi")["passed"] is True
    assert run({"callable": "checks/mychecks.py:verdict"}, "x")["passed"] is None
    assert run({"callable": "checks/mychecks.py:later"}, "x", expected="x")["passed"] is True
    assert "expected bool, float, dict or Verdict" in run({"callable": "checks/mychecks.py:bad"}, "x")["error"]
    assert "does not take a 'config'" in run({"callable": "checks/mychecks.py:is_short", "config": {}}, "x")["error"]


def test_python_module_callable_from_config_dir(checks_dir: Path) -> None:
    result = check({"type": "python", "callable": "evalx_test_modchecks:is_short"}, ctx=make_ctx("ok", config_dir=checks_dir))
    assert result["passed"] is True


def test_python_import_failures_are_errors(checks_dir: Path) -> None:
    ctx = make_ctx("x", config_dir=checks_dir)
    assert "error" in check({"type": "python", "callable": "no_such_module_xyz:f"}, ctx=ctx)
    assert "error" in check({"type": "python", "callable": "checks/missing.py:f"}, ctx=ctx)
    assert "has no attribute 'nope'" in check({"type": "python", "callable": "checks/mychecks.py:nope"}, ctx=ctx)["error"]
    assert "must look like" in check({"type": "python", "callable": "just_a_name"}, ctx=ctx)["error"]


# -- trajectory ---------------------------------------------------------------------


def calls(*names: str) -> list[ToolCall]:
    return [ToolCall(name=n) for n in names]


def test_must_call_tools() -> None:
    assert passes({"type": "must_call_tools", "tools": ["search"]}, tool_calls=calls("search", "fetch"))
    result = check({"type": "must_call_tools", "tools": ["web_search", "calc", "fetch"]}, tool_calls=calls("fetch"))
    assert result["passed"] is False
    assert result["reason"] == "missing required tool call: web_search; missing required tool call: calc"
    assert result["score"] == pytest.approx(1 / 3)


def test_must_not_call_tools() -> None:
    assert passes({"type": "must_not_call_tools", "tools": ["delete_file"]}, tool_calls=calls("read_file"))
    result = check({"type": "must_not_call_tools", "tools": ["delete_file", "rm"]}, tool_calls=calls("delete_file"))
    assert result["passed"] is False and result["reason"] == "forbidden tool called: delete_file"


def test_tool_order() -> None:
    trail = calls("search", "read", "search", "answer")
    assert passes({"type": "tool_order", "tools": ["search", "answer"]}, tool_calls=trail)
    assert passes({"type": "tool_order", "tools": ["answer", "search"]}, tool_calls=trail) is False
    assert passes({"type": "tool_order", "tools": ["search", "answer"], "exact": True}, tool_calls=trail) is False
    assert passes({"type": "tool_order", "tools": ["search", "read", "search", "answer"], "exact": True}, tool_calls=trail)
    result = check({"type": "tool_order", "tools": ["b", "a"]}, tool_calls=calls("a", "b"))
    assert result["reason"] == "expected in order [b, a], called [a, b]"


def test_max_tool_calls() -> None:
    assert passes({"type": "max_tool_calls", "value": 2}, tool_calls=calls("a", "b"))
    result = check({"type": "max_tool_calls", "value": 1}, tool_calls=calls("a", "b"))
    assert result["passed"] is False and result["reason"] == "tool_calls=2 > 1"


def test_max_iterations() -> None:
    assert passes({"type": "max_iterations", "value": 3}, iterations=3)
    assert passes({"type": "max_iterations", "value": 3}, iterations=4) is False
    assert passes({"type": "max_iterations", "value": 3}) is None


def test_completed() -> None:
    assert passes({"type": "completed"}, "done")
    assert passes({"type": "completed"}, "", tool_calls=calls("a"))
    assert passes({"type": "completed"}, "   ") is False
    result = check({"type": "completed"}, "partial", error="timeout after 30s")
    assert result["passed"] is False and "timeout after 30s" in result["reason"]


def test_max_tokens() -> None:
    usage = Usage(input_tokens=40, output_tokens=500)
    result = check({"type": "max_tokens", "value": 100}, usage=usage)
    assert result["passed"] is False and result["reason"] == "output_tokens=500 > 100"
    assert passes({"type": "max_tokens", "value": 500}, usage=usage)
    assert check({"type": "max_tokens", "value": 520, "count": "total"}, usage=usage)["reason"] == "total_tokens=540 > 520"
    assert passes({"type": "max_tokens", "value": 40, "count": "input"}, usage=usage)
    assert passes({"type": "max_tokens", "value": 10}) is None  # no usage reported


def test_max_input_tokens() -> None:
    assert passes({"type": "max_input_tokens", "value": 50}, usage=Usage(input_tokens=40, output_tokens=1))
    result = check({"type": "max_input_tokens", "value": 30}, usage=Usage(input_tokens=40, output_tokens=1))
    assert result["passed"] is False and result["reason"] == "input_tokens=40 > 30"


def test_max_cost() -> None:
    assert passes({"type": "max_cost", "value": 0.01}, cost_usd=0.004)
    result = check({"type": "max_cost", "value": 0.01}, cost_usd=0.0123)
    assert result["passed"] is False and result["reason"] == "cost_usd=0.0123 > 0.01"
    unknown = check({"type": "max_cost", "value": 0.01})
    assert unknown["passed"] is None and "price" in unknown["reason"]


def test_max_latency_ms() -> None:
    assert passes({"type": "max_latency_ms", "value": 1000}, latency_ms=999.5)
    assert check({"type": "max_latency_ms", "value": 1000}, latency_ms=1234)["reason"] == "latency_ms=1234 > 1000"
    assert passes({"type": "max_latency_ms", "value": 1000}) is None


# -- model-graded --------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "llm_judge", "rubric": "is polite"},
        {"type": "llm_judge", "characteristics": ["concise"], "threshold": 0.7},
        {"type": "semantic_similar", "value": "Paris"},
        {"type": "factuality", "pass_on": ["same", "superset"]},
    ],
)
def test_model_graded_without_judge_is_skipped(spec: dict[str, Any]) -> None:
    result = check(spec, "Paris", expected="Paris is the capital")
    assert result["passed"] is None and "error" not in result
    assert result["reason"] == "no judge configured"
    assert cell_status([result]) == ("skipped", None)
    assert get_assertion(spec["type"]).model_graded  # type: ignore[union-attr]


def test_model_graded_with_judge_asks_the_judge() -> None:
    class Stub:
        async def llm_judge(self, ctx: Any, **kw: Any) -> Verdict:
            return Verdict.no(f"judged {kw['rubric']}")

    result = check({"type": "llm_judge", "rubric": "r"}, ctx=make_ctx("x", judge=Stub()))
    assert result["passed"] is False and result["reason"] == "judged r"  # the judge's own tests: test_judge.py


def test_model_graded_config_mistakes_are_errors() -> None:
    assert "rubric" in check({"type": "llm_judge"}, "x")["error"]
    assert "expected" in check({"type": "semantic_similar"}, "x")["error"]


def test_inconclusive_with_a_pass_is_skipped_not_failed() -> None:
    results = [check({"type": "contains", "value": "a"}, "a"), check({"type": "llm_judge", "rubric": "r"}, "a")]
    assert cell_status(results) == ("skipped", 1.0)


# -- not, weight, threshold, errors ---------------------------------------------------


def test_not_inverts_pass_and_score() -> None:
    result = check({"type": "contains", "value": "sorry", "not": True}, "Sure, here it is")
    assert result["passed"] is True and result["score"] == 1.0 and result["not"] is True
    assert result["reason"].startswith("not: expected to contain 'sorry'")
    assert check({"type": "contains", "value": "Sure", "not": True}, "Sure")["passed"] is False


def test_not_leaves_inconclusive_and_errors_alone() -> None:
    assert check({"type": "max_cost", "value": 1, "not": True})["passed"] is None
    broken = check({"type": "regex", "value": "(", "not": True}, "x")
    assert broken["passed"] is None and "error" in broken


def test_weight_and_threshold() -> None:
    ok = check({"type": "contains", "value": "a", "weight": 3}, "a")
    bad = check({"type": "contains", "value": "z"}, "a")
    assert cell_status([ok, bad]) == ("fail", 0.75)
    assert cell_status([ok, bad], threshold=0.7) == ("pass", 0.75)
    assert cell_status([ok, bad], threshold=0.8) == ("fail", 0.75)


def test_partial_scores_count_toward_threshold() -> None:
    kw = check({"type": "keywords", "values": ["a", "b", "c", "d"]}, "a b c")
    assert kw["score"] == 0.75
    assert cell_status([kw], threshold=0.75) == ("pass", 0.75)


def test_a_raising_assertion_is_an_error_not_a_failure() -> None:
    result = check({"type": "json_path", "path": "a[[["}, "{}")
    assert result["passed"] is None and result["error"].startswith("ValueError:")
    assert result["reason"].startswith("assertion raised ValueError:")
    assert cell_status([check({"type": "contains", "value": "x"}, "x"), result])[0] == "error"


def test_unknown_parameter_is_an_error() -> None:
    assert "expectd" in check({"type": "contains", "expectd": "x"}, "x")["error"]


# -- registry and schema -------------------------------------------------------------


def test_every_documented_type_is_registered() -> None:
    names = set(_registry.registered())
    assert {
        "equals",
        "contains",
        "icontains",
        "contains_all",
        "contains_any",
        "regex",
        "starts_with",
        "keywords",
        "numeric_close",
        "is_json",
        "json_schema",
        "json_path",
        "python",
        "must_call_tools",
        "must_not_call_tools",
        "tool_order",
        "max_tool_calls",
        "max_iterations",
        "completed",
        "max_tokens",
        "max_input_tokens",
        "max_cost",
        "max_latency_ms",
        "llm_judge",
        "semantic_similar",
        "factuality",
    } <= names
    assert all(t.description for t in _registry.registered().values())


def test_schema_of_some_types() -> None:
    contains = get_assertion("contains").schema()  # type: ignore[union-attr]
    assert contains["required"] == ["type"]
    assert contains["properties"]["type"] == {"const": "contains"}
    assert contains["properties"]["value"] == {"anyOf": [{"type": "string"}, {"type": "number"}]}
    assert contains["additionalProperties"] is False

    tokens = get_assertion("max_tokens").schema()  # type: ignore[union-attr]
    assert tokens["required"] == ["type", "value"]
    assert tokens["properties"]["value"]["type"] == "integer"
    assert tokens["properties"]["count"] == {"enum": ["output", "total", "input"]}

    path = get_assertion("json_path").schema()  # type: ignore[union-attr]
    assert path["required"] == ["type", "path"]
    assert path["properties"]["path"] == {"type": "string"}

    judge = get_assertion("llm_judge").schema()  # type: ignore[union-attr]
    assert "judge" in judge["properties"]
    assert judge["properties"]["characteristics"] == {"type": "array", "items": {"type": "string"}}

    factuality = get_assertion("factuality").schema()  # type: ignore[union-attr]
    assert factuality["properties"]["pass_on"]["items"] == {"enum": ["subset", "superset", "same", "disagrees", "immaterial"]}


def test_schemas_are_valid_json_schema() -> None:
    import jsonschema

    for atype in _registry.registered().values():
        jsonschema.Draft202012Validator.check_schema(atype.schema())


def test_registering_a_positional_parameter_is_a_type_error() -> None:
    def bad(ctx: AssertionContext, value: str) -> Verdict:
        return Verdict.ok()

    with pytest.raises(TypeError, match="keyword-only"):
        assertion("evalx_test_positional")(bad)
    assert "evalx_test_positional" not in _registry._REGISTRY


def test_a_plugin_type_registers_like_a_builtin() -> None:
    @assertion("evalx_test_plugin")
    def shouts(ctx: AssertionContext, *, times: int = 1) -> Verdict:
        """The output shouts."""
        return Verdict.ok() if ctx.text.isupper() else Verdict.no(f"not shouting: {ctx.text}")

    try:
        assert passes({"type": "evalx_test_plugin", "times": 2}, "HEY")
        assert get_assertion("evalx_test_plugin").schema()["properties"]["times"] == {"type": "integer"}  # type: ignore[union-attr]
    finally:
        _registry._REGISTRY.pop("evalx_test_plugin", None)
