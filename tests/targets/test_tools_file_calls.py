"""A provider target's ``tools_file:`` reaches ``tool_calls_valid``: calls are checked against the tools the file declares.

End to end through ``evalx run`` against the fake OpenAI server
(tests/_fake_llm.py), whose model calls the first tool it is offered with
``{"city": "Paris"}`` when the question mentions the weather.
"""

from __future__ import annotations

from pathlib import Path

from _fake_llm import OPENAI_KEY, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from cli_project import run_cli, write_config
from results_file import read_cells

WEATHER_FIRST = """\
# the tools the agent may call
- name: get_weather
  description: The weather in a city.
  parameters: {type: object, properties: {city: {type: string, pattern: "^[A-Z]"}}, required: [city]}
- name: search
  parameters: {type: object, properties: {q: {type: string}}, required: [q]}
"""

SEARCH_FIRST = """\
[
  {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}
]
"""


def test_tools_file_declares_what_tool_calls_valid_checks(tmp_path: Path, server: FakeLLMServer) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "weather.yaml").write_text(WEATHER_FIRST)
    (tmp_path / "tools" / "search.json").write_text(SEARCH_FIRST)
    model = f"type: provider, provider: openai, model: m, base_url: '{server.url}/v1', api_key: {OPENAI_KEY}"
    config = write_config(
        tmp_path,
        f"""
        targets:
          - {{id: weather, {model}, tools_file: tools/weather.yaml}}
          - {{id: search, {model}, tools_file: tools/search.json}}
        """,
        """\
        datasets:
          - id: d
            cases:
              - {id: w, input: What is the weather?, assert: [{type: tool_calls_valid}]}
        """,
    )
    code, output, run_dir = run_cli(config)
    cells = {row["target"]: row for row in read_cells(run_dir)}

    weather = cells["weather"]
    assert [c["name"] for c in weather["output"]["tool_calls"]] == ["get_weather"]
    (check,) = weather["assertions"]
    assert check["passed"] is True, check  # {"city": "Paris"} fits the file's get_weather schema

    search = cells["search"]
    (check,) = search["assertions"]
    assert check["passed"] is False
    assert check["reason"] == "tool_calls[0] (search): args: 'q' is a required property"  # the file's schema, not a guess
    assert code == 1, output

    sent = {tuple(t["function"]["name"] for t in body["tools"]) for body in server.bodies("/v1/chat/completions")}
    assert sent == {("get_weather", "search"), ("search",)}  # the file's tools were offered to the model too


AGENT = """
def answer(q):
    # a Python agent that reports the calls it made
    return {"text": "done", "tool_calls": [{"name": "search", "args": {"query": q}}]}
"""


def test_python_and_engine_targets_take_a_tools_file_too(tmp_path: Path) -> None:
    """tools_file: on every target kind that declares tools (issue 35): a Python target's calls checked against the file."""
    from click.testing import CliRunner

    from evalx.cli import main

    (tmp_path / "tools.json").write_text(SEARCH_FIRST)
    (tmp_path / "agent.py").write_text(AGENT)
    config = write_config(
        tmp_path,
        """
        targets:
          - {id: agent, type: python, callable: agent.py:answer, tools_file: tools.json}
          - {id: engine, type: engine, url: 'http://127.0.0.1:9', tools_file: tools.json}
        """,
        """\
        datasets:
          - id: d
            cases:
              - {id: s, input: find it, assert: [{type: tool_calls_valid}]}
        """,
    )
    code, output, run_dir = run_cli(config, "--target", "agent")
    (cell,) = read_cells(run_dir)
    (check,) = cell["assertions"]
    assert check["passed"] is False and check["reason"] == "tool_calls[0] (search): args: 'q' is a required property", check
    assert code == 1, output
    (tmp_path / "tools.json").unlink()
    result = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert result.exit_code == 2
    assert "evalconfig.yaml:3 targets[0].tools_file:" in result.stderr and "evalconfig.yaml:4 targets[1].tools_file:" in result.stderr, (
        result.stderr
    )
