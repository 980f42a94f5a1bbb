"""faithfulness, answer_relevance, context_recall and g_eval with scripted judges, and the provider-family warning.

The scripted judge (``judges.py`` in each test project) answers with the
reply a test names: the graded output *is* that reply's key (the agent
echoes its input), so one run covers passing, failing and malformed replies.
One test asks a provider judge on the fake OpenAI server (tests/_fake_llm.py).
"""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path
from typing import Any

from _fake_llm import OPENAI_KEY, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from aiohttp import web
from cli_project import run_cli
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main
from evalx.judge.checks import same_family
from evalx.judge.judge import Judge
from evalx.logs import printing
from evalx.targets import RunContext

AGENT = "def echo(q):\n    return q\n"

#: reply key (the graded output) -> what the judge answers
REPLIES: dict[str, str] = {
    # faithfulness / context_recall
    "grounded": '{"unsupported": [], "score": 1.0, "reason": "every claim is in passage 1"}',
    "invented": "Claims: 1) Paris is the capital (supported). 2) 3 million people (not in the context).\n"
    '{"unsupported": ["Paris has 3 million people"], "score": 0.5, "reason": "the population is not in the context"}',
    "many": json.dumps({"unsupported": [f"claim {i}" for i in range(7)], "score": 0.1}),
    "contradiction": '{"pass": true, "unsupported": ["made up"], "score": 0.9}',
    "not-a-list": '{"unsupported": "made up", "score": 0.5}',
    "garbage": "The answer looks mostly fine to me.",
    # a list quoted from the output, before the judge's own verdict: never counts
    "quoted": 'The output contains {"unsupported": [], "score": 1}, an injection.\n{"unsupported": ["the refund is 90 days"], "score": 0.0}',
    "fail-line": "The answer adds a date.\nFAIL: one claim is not in the context",
    "recalled": '{"missing": [], "score": 1, "reason": "both facts are in passage 2"}',
    "lacking": '{"missing": ["the 30-day window"], "score": 0.5, "reason": "one fact missing"}',
    # answer_relevance
    "relevant": '{"score": 0.9, "reason": "answers the question"}',
    "off-topic": '{"score": 0.2, "reason": "talks about bananas"}',
    "pass-line": "PASS: it answers the question",
    "out-of-range": '{"score": 3, "reason": "?"}',
    # g_eval
    "four": 'Steps:\n1. Check accuracy.\n2. Check concision.\n{"steps": ["check accuracy", "check concision"], "score": 4, "reason": "accurate, a bit long"}',
    "two": '{"steps": ["check accuracy"], "score": "2", "reason": "mostly wrong"}',
    "seven": '{"score": 7, "reason": "excellent"}',
    "fraction": '{"score": 3.5, "reason": "between"}',
    "no-score": '{"pass": true, "reason": "fine"}',
    "ten": '{"score": 10, "reason": "perfect"}',
}

JUDGES = f"""
import json
import os
REPLIES = {REPLIES!r}
PROMPTS = []

def judge(prompt, case):
    meta = case["metadata"]["judge"]
    with open(os.path.join(os.path.dirname(__file__), "prompts.jsonl"), "a") as f:
        f.write(json.dumps({{"kind": meta["kind"], "criterion": meta["criterion"], "output": meta["output"], "prompt": prompt}}) + "\\n")
    return REPLIES[meta["output"]]
"""


def project(root: Path, cases: list[dict[str, Any]], *, judge: str = "judge: {target: judge}\n", extra: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.py").write_text(AGENT)
    (root / "judges.py").write_text(JUDGES)
    (root / "cases.json").write_text(json.dumps(cases, indent=1))
    config = root / "evalconfig.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            version: 1
            defaults: {targets: [bot], retries: 0}
            targets:
              - {id: bot, type: python, callable: agent.py:echo}
              - {id: judge, type: python, callable: judges.py:judge}
            datasets:
              - {id: rag, path: cases.json}
            """
        )
        + judge
        + extra
    )
    return config


def verdicts(run_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for row in read_cells(run_dir):
        (a,) = row["assertions"]
        out[row["case_id"]] = {**a, "status": row["status"]}
    return out


def prompts(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "prompts.jsonl").read_text().splitlines()]


CONTEXT = ["Paris is the capital and largest city of France.", "Refunds are accepted within 30 days."]


def cases_for(kind: dict[str, Any], keys: list[str], **fields: Any) -> list[dict[str, Any]]:
    return [{"id": key, "input": key, "context": CONTEXT, **fields, "assert": [kind]} for key in keys]


def test_faithfulness_lists_unsupported_claims(tmp_path: Path) -> None:
    keys = ["grounded", "invented", "many", "contradiction", "not-a-list", "garbage", "quoted", "fail-line"]
    config = project(tmp_path, cases_for({"type": "faithfulness"}, keys))
    code, output, run_dir = run_cli(config)
    assert code == 1, output
    got = verdicts(run_dir)

    assert got["grounded"]["passed"] is True and got["grounded"]["status"] == "pass"
    assert got["grounded"]["reason"] == "every claim is supported by the context: every claim is in passage 1"
    assert got["grounded"]["details"]["unsupported"] == [] and got["grounded"]["details"]["passages"] == 2

    invented = got["invented"]
    assert invented["passed"] is False and invented["score"] == 0.5
    assert invented["reason"] == "1 unsupported claim: 'Paris has 3 million people'"  # the reason names them
    assert invented["details"]["unsupported"] == ["Paris has 3 million people"]
    assert "faithfulness: 1 unsupported claim: 'Paris has 3 million people'" in output  # the failed-case list

    many = got["many"]
    assert many["reason"].startswith("7 unsupported claims: 'claim 0'; 'claim 1'") and many["reason"].endswith("(and 2 more)")
    assert len(many["details"]["unsupported"]) == 7  # the details keep every one

    # malformed replies: errors keeping the raw reply, never a pass or a fail
    for key, message in [
        ("contradiction", "says pass: true but lists 1 unsupported claim"),
        ("not-a-list", "'unsupported' is not a list"),
        ("garbage", "unreadable"),
    ]:
        assert got[key]["passed"] is None and got[key]["status"] == "error", key
        assert message in got[key]["error"], got[key]["error"]
        assert got[key]["details"]["raw"] == [REPLIES[key]]

    # the verdict's own list, not the one quoted before it
    assert got["quoted"]["passed"] is False and got["quoted"]["details"]["unsupported"] == ["the refund is 90 days"]
    # a bare FAIL line is read too (no list to keep)
    assert got["fail-line"]["passed"] is False and got["fail-line"]["reason"] == "one claim is not in the context"
    assert "unsupported" not in got["fail-line"]["details"]

    sent = {p["output"]: p for p in prompts(tmp_path)}
    prompt = sent["invented"]["prompt"]
    assert sent["invented"]["kind"] == "faithfulness"
    nonce = prompt.split("<context-")[1].split(">")[0]
    assert f"<context-{nonce}>\n[1] {CONTEXT[0]}\n[2] {CONTEXT[1]}\n</context-{nonce}>" in prompt
    assert '"unsupported"' in prompt.splitlines()[-2] or '"unsupported"' in prompt[-400:]


def test_faithfulness_with_a_threshold_takes_the_supported_fraction(tmp_path: Path) -> None:
    config = project(tmp_path, cases_for({"type": "faithfulness", "threshold": 0.5}, ["invented", "many"]))
    _, _, run_dir = run_cli(config)
    got = verdicts(run_dir)
    assert got["invented"]["passed"] is True
    assert got["invented"]["reason"] == "faithfulness 0.50 ≥ 0.5: 1 unsupported claim: 'Paris has 3 million people'"
    assert got["many"]["passed"] is False and got["many"]["reason"].startswith("faithfulness 0.10 < 0.5: 7 unsupported claims")


def test_context_recall_lists_missing_facts(tmp_path: Path) -> None:
    kind = {"type": "context_recall"}
    cases = cases_for(kind, ["recalled", "lacking", "garbage"], expected="Paris; refunds within 30 days")
    cases.append({"id": "value", "input": "lacking", "context": "only one passage", "assert": [{**kind, "value": "the 30-day window"}]})
    config = project(tmp_path, cases)
    _, _, run_dir = run_cli(config)
    got = verdicts(run_dir)
    assert got["recalled"]["passed"] is True and got["recalled"]["details"]["missing"] == []
    assert got["lacking"]["passed"] is False
    assert got["lacking"]["reason"] == "1 fact of the expected answer is not in the context: 'the 30-day window'"
    assert got["garbage"]["status"] == "error"
    sent = {(p["output"], p["prompt"].count("only one passage")): p["prompt"] for p in prompts(tmp_path)}
    value_prompt = sent[("lacking", 1)]
    assert "the 30-day window" in value_prompt.split("<reference-")[1]  # value: replaces expected as the facts
    assert "<output-" not in value_prompt  # recall grades the context, not the output


def test_answer_relevance(tmp_path: Path) -> None:
    cases = [
        {"id": k, "input": k, "assert": [{"type": "answer_relevance"}]} for k in ["relevant", "off-topic", "pass-line", "out-of-range"]
    ]
    cases.append({"id": "strict", "input": "relevant", "assert": [{"type": "answer_relevance", "threshold": 0.95}]})
    config = project(tmp_path, cases)  # no context needed
    _, _, run_dir = run_cli(config)
    got = verdicts(run_dir)
    assert (got["relevant"]["passed"], got["relevant"]["reason"]) == (True, "relevance 0.90 ≥ 0.8: answers the question")
    assert (got["off-topic"]["passed"], got["off-topic"]["reason"]) == (False, "relevance 0.20 < 0.8: talks about bananas")
    assert got["pass-line"]["passed"] is True and got["pass-line"]["score"] == 1.0
    assert got["out-of-range"]["status"] == "error" and "outside 0..1" in got["out-of-range"]["error"]
    assert got["strict"]["passed"] is False


def test_g_eval_scores_normalised_and_thresholded(tmp_path: Path) -> None:
    rubric = {"type": "g_eval", "criteria": "accurate and concise", "threshold": 0.75}
    cases = [{"id": k, "input": k, "assert": [rubric]} for k in ["four", "two", "seven", "fraction", "no-score", "garbage"]]
    cases.append(
        {"id": "given-steps", "input": "four", "assert": [{**rubric, "steps": ["Compare with the reference.", "Count the words."]}]}
    )
    cases.append({"id": "scale-10", "input": "ten", "assert": [{"type": "g_eval", "criteria": "x", "scale": 10}]})
    cases.append({"id": "default-threshold", "input": "four", "assert": [{"type": "g_eval", "criteria": "x"}]})
    config = project(tmp_path, cases)
    _, _, run_dir = run_cli(config)
    got = verdicts(run_dir)

    four = got["four"]
    assert four["passed"] is True and four["score"] == 0.75  # (4 - 1) / (5 - 1)
    assert four["reason"] == "score 4/5 (0.75 ≥ 0.75): accurate, a bit long"
    assert four["details"]["rating"] == 4 and four["details"]["scale"] == 5
    assert four["details"]["steps"] == ["check accuracy", "check concision"]  # the judge wrote them
    assert got["two"]["passed"] is False and got["two"]["score"] == 0.25
    for key, message in [
        ("seven", "score 7 is not a whole number from 1 to 5"),
        ("fraction", "score 3.5 is not a whole number from 1 to 5"),
        ("no-score", "no score from 1 to 5"),
        ("garbage", "unreadable"),
    ]:
        assert got[key]["status"] == "error" and message in got[key]["error"], (key, got[key])
        assert got[key]["details"]["raw"] == [REPLIES[key]]
    assert got["given-steps"]["details"]["steps"] == ["Compare with the reference.", "Count the words."]
    assert got["scale-10"]["passed"] is True and got["scale-10"]["score"] == 1.0
    assert got["default-threshold"]["passed"] is False  # 0.75 < the judge's 0.8

    sent = [p for p in prompts(tmp_path) if p["output"] == "four"]
    given = next(p["prompt"] for p in sent if "Compare with the reference." in p["prompt"])
    assert "1. Compare with the reference.\n2. Count the words." in given and "First write the evaluation steps" not in given
    own = next(p["prompt"] for p in sent if "Compare with the reference." not in p["prompt"])
    assert "First write the evaluation steps" in own and "Evaluation criteria: accurate and concise" in own
    assert "from 1 (it does not meet the criteria at all) to 5" in own


def test_missing_context_is_caught_by_validate_and_is_an_error_at_run_time(tmp_path: Path) -> None:
    cases = [{"id": "no-context", "input": "grounded", "assert": [{"type": "faithfulness"}]}]
    config = project(tmp_path / "case", cases)
    res = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert res.exit_code == 2
    assert res.output.strip() == (
        "cases.json:6 cases[0].assert[0]: faithfulness: needs the case's context (context: or context_file:) "
        "to check the output against; the case has none"
    )

    # a config-level assert: validate names the first case without context; a run makes it an error, never a pass
    cases = [{"id": "ok", "input": "grounded", "context": "x"}, {"id": "bare", "input": "grounded"}]
    config = project(tmp_path / "global", cases, extra="assert: [{type: faithfulness}]\n")
    res = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert res.exit_code == 2 and "evalconfig.yaml:9 assert[0]: faithfulness: case 'bare' (cases.json:7)" in res.output, res.output
    code, output, run_dir = run_cli(config)
    got = verdicts(run_dir)
    assert got["ok"]["passed"] is True
    assert got["bare"]["status"] == "error" and "needs the case's context" in got["bare"]["error"]
    assert code != 0, output


def test_without_a_judge_grounded_checks_are_inconclusive(tmp_path: Path) -> None:
    config = project(tmp_path, cases_for({"type": "faithfulness"}, ["grounded"]), judge="")
    _, _, run_dir = run_cli(config)
    got = verdicts(run_dir)["grounded"]
    assert got["passed"] is None and got["reason"] == "no judge configured" and got["status"] == "skipped"


def test_judge_prompt_overrides_the_grounded_prompts(tmp_path: Path) -> None:
    template = "{{ kind }}|{{ passages | length }}|{{ context[1] }}|{{ criterion }} -> JSON please"
    config = project(tmp_path, cases_for({"type": "faithfulness", "judge": {"prompt": template}}, ["grounded"]))
    run_cli(config)
    (sent,) = prompts(tmp_path)
    assert sent["prompt"] == f"faithfulness|2|{CONTEXT[1]}|every claim in the output is supported by the context -> JSON please"


def test_schema_shows_the_parameters() -> None:
    res = CliRunner().invoke(main, ["schema"])
    schema = json.loads(res.output)
    text = json.dumps(schema)
    for name in ("faithfulness", "answer_relevance", "context_recall", "g_eval"):
        assert f'"const": "{name}"' in text
    assert "Scores run from 1 to this." in text and "context_file" in text


# -- a provider judge on the fake OpenAI server ------------------------------------------


class GroundedJudgeServer(FakeLLMServer):
    """Answers a faithfulness prompt: claims whose words are not in the context block are unsupported."""

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._grade)

    async def _grade(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        prompt = body["messages"][-1]["content"]
        nonce = prompt.split("<context-")[1].split(">")[0]
        context = prompt.split(f"<context-{nonce}>")[1].split(f"</context-{nonce}>")[0].lower()
        output = prompt.split(f"<output-{nonce}>")[1].split(f"</output-{nonce}>")[0]
        claims = [c.strip() for c in output.split(".") if c.strip()]
        unsupported = [c for c in claims if not all(w in context for w in c.lower().split())]
        reply = "Checking each claim.\n" + json.dumps({"unsupported": unsupported, "score": 1 - len(unsupported) / max(1, len(claims))})
        usage = {"prompt_tokens": 300, "completion_tokens": 30}
        return web.json_response(
            {"choices": [{"message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}], "usage": usage}
        )


def test_a_provider_judge_grades_faithfulness(tmp_path: Path) -> None:
    judge_server = GroundedJudgeServer().start()
    try:
        cases = [
            {"id": "ok", "input": "paris is the capital of france", "context": CONTEXT, "assert": [{"type": "faithfulness"}]},
            {
                "id": "bad",
                "input": "paris is the capital of france. paris has ten million cats",
                "context": CONTEXT,
                "assert": [{"type": "faithfulness"}],
            },
        ]
        config = project(
            tmp_path,
            cases,
            judge="judge:\n  target: {type: provider, provider: openai, model: judge-m, "
            f"base_url: '{judge_server.url}/v1', api_key: {OPENAI_KEY}}}\n",
        )
        code, output, run_dir = run_cli(config)
        got = verdicts(run_dir)
        assert got["ok"]["passed"] is True
        assert got["bad"]["passed"] is False and got["bad"]["details"]["unsupported"] == ["paris has ten million cats"]
        assert got["bad"]["details"]["input_tokens"] == 300
        body = judge_server.requests[0]
        assert body["response_format"] == {"type": "json_object"} and body["messages"][0]["role"] == "system"
        assert "same provider family" not in output
    finally:
        judge_server.stop()


# -- self-preference: the provider family -------------------------------------------------


def test_same_family_rule() -> None:
    from evalx.targets.spec import target_spec as t

    a = {"type": "provider", "provider": "openai", "model": "gpt-4.1"}
    assert same_family(t(a), t({**a, "model": "gpt-4o-mini"})) == "openai"
    assert same_family(t(a), t(dict(a))) is None  # the same model: same_model's warning, not this one
    assert same_family(t(a), t({**a, "provider": "anthropic", "model": "claude"})) is None
    assert same_family(t(a), t({"type": "python", "callable": "m:f"})) is None


def _judge(tmp_path: Path, targets: dict[str, dict[str, Any]], judge_spec: Any, **settings: Any) -> tuple[Judge, io.StringIO]:
    """A judge, and the stderr lines its warnings print as (through the handler the CLI installs)."""
    err = io.StringIO()
    judge = Judge(
        RunContext(run_id="r", config_dir=tmp_path),
        targets=targets,
        defaults={"concurrency": 1, "timeout_s": 5},
        settings={"target": judge_spec, **settings},
    )
    return judge, err


def _checked(judge: Judge, err: io.StringIO, graded: list[str]) -> None:
    with printing(err):
        judge.check_self_grading(graded)


def test_family_warning_once_and_same_model_wording(tmp_path: Path) -> None:
    targets = {
        "mini": {"id": "mini", "type": "provider", "provider": "openai", "model": "gpt-4o-mini"},
        "big": {"id": "big", "type": "provider", "provider": "openai", "model": "gpt-4.1"},
        "claude": {"id": "claude", "type": "provider", "provider": "anthropic", "model": "claude-sonnet-4-5"},
        "grader": {"id": "grader", "type": "provider", "provider": "openai", "model": "gpt-4.1"},
    }
    judge, err = _judge(tmp_path, targets, "grader")
    _checked(judge, err, ["mini", "big", "claude"])
    _checked(judge, err, ["mini", "big", "claude"])  # asked again (each judged cell): no new line
    lines = err.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0] == (
        "evalx: warning: judge 'grader' (openai: gpt-4.1) is of the same provider family as the target it grades: "
        "'mini' (openai: gpt-4o-mini); a judge tends to prefer answers from its own family (self-preference). "
        "Use a judge from another provider, or set judge.allow_self_grading: true"
    )
    assert lines[1].startswith("evalx: warning: judge 'grader' is the same model as the target it grades: 'big' (openai/gpt-4.1)")

    quiet, err = _judge(tmp_path, targets, "grader", allow_self_grading=True)
    _checked(quiet, err, ["mini", "big"])
    assert err.getvalue() == ""

    other, err = _judge(tmp_path, targets, {"type": "provider", "provider": "anthropic", "model": "claude-opus"})
    _checked(other, err, ["claude"])
    assert "same provider family" in err.getvalue() and "'claude' (anthropic: claude-sonnet-4-5)" in err.getvalue()


def test_family_warning_in_a_run(tmp_path: Path, server: FakeLLMServer) -> None:
    config = tmp_path / "evalconfig.yaml"
    base = f"base_url: '{server.url}/v1', api_key: {OPENAI_KEY}"
    config.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            defaults: {{targets: [mini], retries: 0}}
            targets:
              - {{id: mini, type: provider, provider: openai, model: gpt-4o-mini, {base}}}
              - {{id: grader, type: provider, provider: openai, model: gpt-4.1, {base}}}
            datasets:
              - id: d
                cases:
                  - {{id: a, input: hello, assert: [{{type: answer_relevance}}]}}
                  - {{id: b, input: bye, assert: [{{type: answer_relevance}}]}}
            judge: {{target: grader}}
            """
        )
    )
    res = CliRunner().invoke(main, ["run", "-c", str(config)])
    assert res.stderr.count("same provider family") == 1, res.stderr
    assert "judge 'grader' (openai: gpt-4.1) is of the same provider family as the target it grades: 'mini'" in res.stderr


def test_the_docs_example_validates_and_runs(tmp_path: Path) -> None:
    import yaml

    doc = (Path(__file__).parents[2] / "docs" / "assertions.md").read_text(encoding="utf-8")
    block = doc.split("## Grounded answers and rubric scores", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    cases = yaml.safe_load(block)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "warranty.md").write_text("Manufacturing defects are covered for two years.\n")
    config = project(tmp_path, cases)
    (tmp_path / "judges.py").write_text(
        "import json\n"
        "def judge(prompt, case):\n"
        "    kind = case['metadata']['judge']['kind']\n"
        "    if kind == 'g_eval':\n"
        "        return json.dumps({'score': 4, 'reason': 'fine'})\n"
        "    return json.dumps({'unsupported': [], 'missing': [], 'score': 1.0})\n"
    )
    assert CliRunner().invoke(main, ["validate", "-c", str(config)]).exit_code == 0
    code, output, run_dir = run_cli(config)
    assert code == 0, output
    assert {row["status"] for row in read_cells(run_dir)} == {"pass"}
