"""``semantic_similar`` with ``embedding: <provider target>``: provider embeddings end to end.

The embedder is an ``openai`` provider target on the fake server
(tests/_fake_llm.py), whose ``/v1/embeddings`` returns bag-of-words vectors,
so the cosine of two texts is their word overlap — known in advance. The
graded agent is a Python callable; no judge is configured (embeddings need
none).
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import ANTHROPIC_KEY, OPENAI_KEY, Canned, FakeLLMServer, embedding_for, fast_backoff, server  # noqa: F401  (fixtures)
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main
from evalx.targets.definitions import find_provider, load_definition

EMBEDDINGS = "/v1/embeddings"
PRICE_PER_MTOK = 0.02  # text-embedding-3-small in providers/openai.yaml

AGENT = """
def answer(question):
    return {
        "capital": "Paris is the capital of France.",
        "letters": "alpha beta gamma delta",
        "refund": "You can request a refund within 30 days.",
        "silent": "",
    }[question]
"""

CASES = [
    # the same words in another order: cosine 1
    {
        "id": "same",
        "input": "capital",
        "expected": "The capital of France is Paris.",
        "assert": [{"type": "semantic_similar", "embedding": "embedder"}],
    },
    # 3 shared words of 4: cosine exactly 0.75, which passes a threshold of 0.75
    {
        "id": "at-threshold",
        "input": "letters",
        "expected": "alpha beta gamma epsilon",
        "assert": [{"type": "semantic_similar", "embedding": "embedder", "threshold": 0.75}],
    },
    # nothing in common with the reference
    {
        "id": "dissimilar",
        "input": "refund",
        "expected": "Bonjour, comment allez-vous?",
        "assert": [{"type": "semantic_similar", "embedding": "embedder"}],
    },
]


def embedder(
    server: FakeLLMServer, *, provider: str = "openai", model: str = "text-embedding-3-small", api_key: str = OPENAI_KEY, extra: str = ""
) -> str:
    base_url = f"{server.url}/v1" if provider != "anthropic" else server.url
    return f"  - {{id: embedder, type: provider, provider: {provider}, model: {model}, base_url: '{base_url}', api_key: '{api_key}', retries: 2{extra}}}\n"


def write_project(root: Path, embedder_line: str, cases: list[dict[str, Any]] = CASES, head: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.py").write_text(AGENT)
    (root / "cases.json").write_text(json.dumps(cases, indent=1))
    (root / "evalconfig.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            name: embeddings
            defaults: {targets: [bot], retries: 0}
            targets:
              - {id: bot, type: python, callable: agent.py:answer}
            """
        )
        + embedder_line
        + "datasets:\n  - {id: golden, path: cases.json}\n"
        + head
    )
    return root


def run(project: Path, *args: str) -> tuple[int, str, dict[str, dict[str, Any]], dict[str, Any]]:
    res = CliRunner().invoke(main, ["run", "-c", str(project / "evalconfig.yaml"), *args])
    runs = sorted((project / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    rows = read_cells(runs[-1])
    summary = json.loads((runs[-1] / "summary.json").read_text())
    return res.exit_code, res.output, {r["case_id"]: r for r in rows}, summary


def only(row: dict[str, Any]) -> dict[str, Any]:
    (assertion,) = row["assertions"]
    return assertion


def everything_written(project: Path) -> str:
    """Every file evalx wrote beside the config: runs, reports and the response cache."""
    inputs = {"evalconfig.yaml", "agent.py", "cases.json"}
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in project.rglob("*") if p.is_file() and p.name not in inputs)


def cosine(a: str, b: str) -> float:
    va, vb = embedding_for(a), embedding_for(b)
    dot = sum(x * y for x, y in zip(va, vb))
    return dot / (math.sqrt(sum(x * x for x in va)) * math.sqrt(sum(y * y for y in vb)))


def words(text: str) -> int:
    return len(text.split())


# --- end to end through the CLI ----------------------------------------------------------


def test_provider_embeddings_grade_similarity_with_cost(server: FakeLLMServer, tmp_path: Path) -> None:
    assert cosine("alpha beta gamma delta", "alpha beta gamma epsilon") == 0.75  # no hash collisions: the boundary is exact
    project = write_project(tmp_path / "p", embedder(server))
    code, output, rows, summary = run(project)
    assert code == 1, output  # one case fails

    same = only(rows["same"])
    assert rows["same"]["status"] == "pass" and same["passed"] is True
    assert same["details"]["cosine"] == pytest.approx(1.0) and same["reason"] == "cosine similarity 1.000 ≥ 0.8"

    boundary = only(rows["at-threshold"])
    assert rows["at-threshold"]["status"] == "pass" and boundary["passed"] is True
    assert boundary["details"]["cosine"] == pytest.approx(0.75) and boundary["reason"] == "cosine similarity 0.750 ≥ 0.75"

    dissimilar = only(rows["dissimilar"])
    assert rows["dissimilar"]["status"] == "fail" and dissimilar["passed"] is False
    assert dissimilar["details"]["cosine"] == pytest.approx(0.0) and dissimilar["reason"] == "cosine similarity 0.000 < 0.8"
    assert "cosine similarity 0.000 < 0.8" in output  # the failed-case list

    # two embeddings per assertion, each the OpenAI request shape, with the key in the header only
    assert server.count(EMBEDDINGS) == 6 and server.count() == 6
    sent = {b["input"] for b in server.bodies(EMBEDDINGS)}
    assert sent == {
        "Paris is the capital of France.",
        "The capital of France is Paris.",
        "alpha beta gamma delta",
        "alpha beta gamma epsilon",
        "You can request a refund within 30 days.",
        "Bonjour, comment allez-vous?",
    }
    assert all(b["model"] == "text-embedding-3-small" and set(b) == {"model", "input"} for b in server.bodies(EMBEDDINGS))
    assert all(r.headers["Authorization"] == f"Bearer {OPENAI_KEY}" for r in server.requests)

    # tokens and cost are recorded per assertion, as for judge calls, and summed as judge cost
    tokens = words("Paris is the capital of France.") + words("The capital of France is Paris.")
    assert same["details"]["calls"] == 2 and same["details"]["input_tokens"] == tokens and same["details"]["output_tokens"] == 0
    assert same["details"]["cost_usd"] == pytest.approx(tokens * PRICE_PER_MTOK / 1e6)
    assert same["details"]["cached"] is False and same["details"]["embedding"] == "embedder"
    assert rows["same"]["judge_cost_usd"] == pytest.approx(tokens * PRICE_PER_MTOK / 1e6)
    assert summary["judge"]["calls"] == 6
    assert summary["judge_cost_usd"] == pytest.approx(sum(r["judge_cost_usd"] for r in rows.values()))

    assert OPENAI_KEY not in output and OPENAI_KEY not in everything_written(project)


def test_embeddings_are_cached_and_no_cache_sends_again(server: FakeLLMServer, tmp_path: Path) -> None:
    project = write_project(tmp_path / "p", embedder(server))
    _, _, first, _ = run(project)
    assert server.count(EMBEDDINGS) == 6

    code, output, second, summary = run(project)
    assert code == 1, output
    assert server.count(EMBEDDINGS) == 6  # nothing sent: every embedding from the cache
    for case_id, row in second.items():
        details = only(row)["details"]
        assert details["cached"] is True and details["calls"] == 2
        assert details["cosine"] == pytest.approx(only(first[case_id])["details"]["cosine"])
        assert details["cost_usd"] == pytest.approx(only(first[case_id])["details"]["cost_usd"])  # repriced, as cached cells are
    assert summary["judge"]["cached_calls"] == 6

    run(project, "--no-cache")
    assert server.count(EMBEDDINGS) == 12


def test_a_server_error_is_retried_through_the_shared_http_layer(server: FakeLLMServer, tmp_path: Path) -> None:
    server.script(Canned(503, {"error": {"message": "overloaded"}}, paths=(EMBEDDINGS,)))
    project = write_project(tmp_path / "p", embedder(server), cases=CASES[:1])
    code, output, rows, _ = run(project)
    assert code == 0, output
    assert only(rows["same"])["passed"] is True and server.count(EMBEDDINGS) == 3  # one retried


def test_a_definition_without_embeddings_is_a_named_error(server: FakeLLMServer, tmp_path: Path) -> None:
    project = write_project(
        tmp_path / "p", embedder(server, provider="anthropic", model="claude-3-5-haiku-latest", api_key=ANTHROPIC_KEY), cases=CASES[:1]
    )
    code, output, rows, _ = run(project)
    assert code != 0
    verdict = only(rows["same"])
    assert rows["same"]["status"] == "error" and verdict["passed"] is None
    assert verdict["error"].startswith("target 'embedder' cannot produce embeddings: provider 'anthropic' has no embeddings: section")
    assert "anthropic.yaml" in verdict["error"]
    assert server.count() == 0  # nothing was sent
    assert ANTHROPIC_KEY not in output and ANTHROPIC_KEY not in everything_written(project)

    # evalx validate says so before any run
    res = CliRunner().invoke(main, ["validate", "-c", str(project / "evalconfig.yaml")])
    assert res.exit_code != 0
    assert "semantic_similar.embedding: target 'embedder' cannot produce embeddings: provider 'anthropic'" in res.output


def test_a_wrong_key_is_an_error_and_never_written(server: FakeLLMServer, tmp_path: Path) -> None:
    wrong = "sk-wrong-KEY-must-not-leak-42"  # the fake server quotes it back in its 401 body, as OpenAI does
    project = write_project(tmp_path / "p", embedder(server, api_key=wrong), cases=CASES[:1])
    code, output, rows, _ = run(project)
    assert code != 0
    verdict = only(rows["same"])
    assert rows["same"]["status"] == "error" and verdict["passed"] is None
    assert verdict["error"].startswith("the embedding call failed: ") and "401" in verdict["error"]
    assert server.count(EMBEDDINGS) >= 1
    assert wrong not in output and wrong not in everything_written(project)


def test_an_empty_output_fails_without_asking(server: FakeLLMServer, tmp_path: Path) -> None:
    cases = [{"id": "silent", "input": "silent", "expected": "anything", "assert": [{"type": "semantic_similar", "embedding": "embedder"}]}]
    project = write_project(tmp_path / "p", embedder(server), cases=cases)
    _, _, rows, _ = run(project)
    verdict = only(rows["silent"])
    assert verdict["passed"] is False and verdict["reason"] == "the output is empty: nothing to compare with the reference"
    assert server.count() == 0


def test_a_user_definition_with_a_wrong_vector_expression_names_its_line(server: FakeLLMServer, tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / "providers").mkdir(parents=True)
    openai = (find_provider("openai").source).read_text()
    (project / "providers" / "myembed.yaml").write_text(
        openai.replace("name: openai\n", "name: myembed\n").replace("vector: response.data[0].embedding", "vector: response.data[0].vector")
    )
    write_project(project, embedder(server, provider="myembed"), cases=CASES[:1], head="providers_dir: providers\n")
    _, _, rows, _ = run(project)
    error = only(rows["same"])["error"]
    line = next(i for i, text in enumerate((project / "providers" / "myembed.yaml").read_text().splitlines(), 1) if "vector:" in text)
    assert f"myembed.yaml:{line} embeddings.vector: expected a non-empty list of numbers, got nothing" in error


# --- the definitions ------------------------------------------------------------------------


def test_ollama_embeddings_request_and_response() -> None:
    d = find_provider("ollama")
    assert d.embeddings is not None and (d.embeddings.method, d.embeddings.path) == ("POST", "/api/embed")
    assert d.render_embeddings_body({"model": "nomic-embed-text", "input": 'a "quoted" text'}) == {
        "model": "nomic-embed-text",
        "input": 'a "quoted" text',
    }
    response = {"model": "nomic-embed-text", "embeddings": [[0.1, -0.2, 0.3]], "prompt_eval_count": 5}
    assert d.evaluate(("embeddings", "vector"), {"response": response}) == [0.1, -0.2, 0.3]
    assert d.evaluate(("embeddings", "usage", "input_tokens"), {"response": response}) == 5


def test_openai_embeddings_request_and_pricing() -> None:
    d = find_provider("openai")
    assert d.embeddings is not None and (d.embeddings.method, d.embeddings.path) == ("POST", "/embeddings")
    response = {"data": [{"embedding": [1, 0]}], "usage": {"prompt_tokens": 8}}
    assert d.evaluate(("embeddings", "vector"), {"response": response}) == [1, 0]
    assert d.evaluate(("embeddings", "usage", "input_tokens"), {"response": response}) == 8
    price = d.price("text-embedding-3-small")
    assert price is not None and price.cost(1_000_000, 0) == pytest.approx(0.02)
    assert find_provider("anthropic").embeddings is None


def test_an_embeddings_section_is_validated(tmp_path: Path) -> None:
    from evalx.errors import ConfigError

    path = tmp_path / "bad.yaml"
    path.write_text(
        "request: {path: /x, body: '{}'}\nresponse: {text: response.t}\n"
        "embeddings:\n  path: /embed\n  body: '{\"input\": {{ input | tojson }}'\n  usage: {tokens: response.n}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_definition(path)
    text = str(info.value)
    assert "bad.yaml:3 embeddings.vector: 'vector' is a required property" in text
    assert "bad.yaml:6 embeddings.usage.tokens: unknown key 'tokens' (did you mean 'input_tokens'?)" in text
