"""``evalx init --template provider --provider NAME``: a starter for every shipped provider, through the CLI.

Parametrized over the shipped definitions (a new one is covered without a line here): the
config names the provider, its example model, the key variable(s) or the auth kind's needs and
a region where the URL has one, and validates as written with none of the provider's variables
set. openai, anthropic and gemini run against the fake servers of the contract tests. An unknown
name is one line with a did-you-mean and the list; ``evalx init --help`` lists them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from _fake_llm import ANTHROPIC_KEY, OPENAI_KEY, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from click.testing import CliRunner, Result
from contract_server import Answer, ContractServer
from results_file import read_cells

from evalx.cli import main
from evalx.config.provider_starter import shipped_names
from evalx.targets.definitions import find_provider, load_definition
from evalx.targets.transport.auth import AUTH_EXTRAS, REGION_VARIABLES

SHIPPED = shipped_names()


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_the_list_is_the_catalog() -> None:
    assert len(SHIPPED) >= 19 and {"openai", "gemini", "bedrock", "vertex", "groq"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_a_starter_for_each_shipped_provider_names_what_it_needs_and_validates(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = find_provider(name)
    assert d.example_model, f"providers/{name}.yaml declares no example_model: (evalx init writes it)"
    written = (d.written("base_url") or "") + (d.written("request", "path") or "")
    url_vars = re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", written)
    for var in [*d.auth_envs, *url_vars, *REGION_VARIABLES.get(d.auth.kind, ())]:
        monkeypatch.delenv(var, raising=False)  # validates as written, with nothing set

    created = cli("init", "--template", "provider", "--provider", name, "proj")
    assert created.exit_code == 0, created.output
    root = tmp_path / "proj"
    assert not (root / "demo_server.py").exists()  # the demo stands in for openai only
    text = (root / "evalconfig.yaml").read_text(encoding="utf-8")
    [target] = yaml.safe_load(text)["targets"]
    assert (target["provider"], target["model"]) == (name, d.example_model)
    assert "api_key" not in target and "base_url" not in target  # the definition reads its variables itself
    for var in [*d.auth_envs, *url_vars]:  # in the config's comments and in the next steps
        assert f"export {var}=" in text or var in text, var
        assert var in created.output, var
    if d.auth.kind in AUTH_EXTRAS:
        assert AUTH_EXTRAS[d.auth.kind] in text and AUTH_EXTRAS[d.auth.kind] in created.output
    assert ("region" in target) is d.uses_region
    if d.uses_region:
        assert all(v in text for v in REGION_VARIABLES[d.auth.kind])

    monkeypatch.chdir(root)
    validated = cli("validate")
    assert validated.exit_code == 0, validated.output
    assert "warning" not in validated.output, validated.output


def test_no_provider_flag_keeps_the_demo_starter(tmp_path: Path) -> None:
    assert cli("init", "--template", "provider", "p").exit_code == 0
    assert (tmp_path / "p" / "demo_server.py").is_file()
    assert "DEMO_PORT" in (tmp_path / "p" / "evalconfig.yaml").read_text(encoding="utf-8")


def test_provider_alone_implies_the_provider_template(tmp_path: Path) -> None:
    result = cli("init", "--provider", "groq", "g")
    assert result.exit_code == 0, result.output
    assert "provider: groq" in (tmp_path / "g" / "evalconfig.yaml").read_text(encoding="utf-8")
    assert "export GROQ_API_KEY=..." in result.output and "evalx run" in result.output


def test_an_unknown_provider_is_one_line_with_a_did_you_mean_and_the_list(tmp_path: Path) -> None:
    result = cli("init", "--template", "provider", "--provider", "gemnii", "proj")
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.startswith("evalx init: unknown provider 'gemnii' (did you mean 'gemini'?); known: ")
    assert line.endswith(", ".join(SHIPPED))
    assert not (tmp_path / "proj").exists()


def test_provider_with_another_template_is_refused(tmp_path: Path) -> None:
    result = cli("init", "--template", "judge", "--provider", "openai", "proj")
    assert result.exit_code == 2
    assert result.output.strip() == "evalx init: --provider goes with --template provider, not --template judge"
    assert not (tmp_path / "proj").exists()


def test_init_help_lists_the_providers() -> None:
    result = cli("init", "--help")
    assert result.exit_code == 0
    squeezed = "".join(result.output.split())  # click wraps the help, at hyphens too
    assert "--providerNAME" in squeezed and "Oneof:" + ",".join(SHIPPED) + "." in squeezed


def test_example_model_is_not_inherited(tmp_path: Path) -> None:
    (tmp_path / "gw.yaml").write_text("extends: openai\nbase_url: http://gw.example/v1\n", encoding="utf-8")
    assert load_definition(tmp_path / "gw.yaml").example_model is None
    (tmp_path / "gw.yaml").write_text("extends: openai\nexample_model: team-model\n", encoding="utf-8")
    assert load_definition(tmp_path / "gw.yaml").example_model == "team-model"


# --- the generated starters run (against the contract tests' fake servers) -----------------------


def init_and_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Result, list[dict[str, object]]]:
    assert cli("init", "--provider", name, "proj").exit_code == 0
    monkeypatch.chdir(tmp_path / "proj")
    ran = cli("run")
    runs = sorted((tmp_path / "proj" / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    return ran, read_cells(runs[-1])


def no_cell_errored(ran: Result, cells: list[dict[str, object]]) -> None:
    assert ran.exit_code in (0, 1), ran.output  # graded: pass or fail, never an error of the run
    assert len(cells) == 4 and all(c["status"] in ("pass", "fail") for c in cells), [(c["case_id"], c.get("error")) for c in cells]


def test_the_openai_starter_runs(server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    ran, cells = init_and_run("openai", tmp_path, monkeypatch)
    no_cell_errored(ran, cells)
    bodies = server.bodies("/v1/chat/completions")
    assert len(bodies) == 4 and {b["model"] for b in bodies} == {"gpt-4o-mini"}
    assert bodies[0]["messages"][0]["role"] == "system" and "Acme Store" in bodies[0]["messages"][0]["content"]
    assert any(c["case_id"] == "capital" and c["status"] == "pass" for c in cells)


def test_the_anthropic_starter_runs(server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    ran, cells = init_and_run("anthropic", tmp_path, monkeypatch)
    no_cell_errored(ran, cells)
    bodies = server.bodies("/v1/messages")
    assert len(bodies) == 4 and {b["model"] for b in bodies} == {find_provider("anthropic").example_model}
    assert "Acme Store" in json.dumps(bodies[0]["system"])


@pytest.fixture
def gemini_server() -> Iterator[ContractServer]:
    s = ContractServer().start()
    yield s
    s.stop()


def test_the_gemini_starter_runs(gemini_server: ContractServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_BASE_URL", gemini_server.url)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "AIza-starter-key-0000")
    answer = {
        "candidates": [{"content": {"parts": [{"text": "Paris is the capital of France."}], "role": "model"}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 7},
    }
    gemini_server.script(*[Answer(body=answer) for _ in range(4)])
    ran, cells = init_and_run("gemini", tmp_path, monkeypatch)
    no_cell_errored(ran, cells)
    assert len(gemini_server.requests) == 4
    req = gemini_server.requests[0]
    assert req["path"] == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert req["headers"]["x-goog-api-key"] == "AIza-starter-key-0000"
    assert "Acme Store" in json.dumps(req["body"]["systemInstruction"])
