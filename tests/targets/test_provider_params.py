"""A provider target's ``params:`` checked against the ``params:`` list of its definition: an unknown key is a warning."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from stream_server import StreamServer

from evalx.cli import main
from evalx.config.loader import load_config
from evalx.targets.definitions import find_provider
from evalx.targets.shipped import data_dir


@pytest.fixture(scope="module")
def server() -> Iterator[StreamServer]:
    s = StreamServer().start()
    yield s
    s.stop()


def project(tmp_path: Path, provider: str, params: str, base_url: str = "http://127.0.0.1:9/v1", extra: str = "") -> Path:
    path = tmp_path / "evalconfig.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: params
            {extra}
            targets:
              - id: model
                type: provider
                provider: {provider}
                model: whole
                base_url: {base_url}
                api_key: sk-params-test
                params: {params}
            datasets:
              - id: d
                cases:
                  - id: c
                    input: What is the capital of France?
                    assert: [{{type: contains, value: Paris}}]
            """
        ),
        encoding="utf-8",
    )
    return path


def test_a_typo_in_params_is_a_warning_with_did_you_mean(tmp_path: Path) -> None:
    path = project(tmp_path, "openai", "{temprature: 0.2, max_tokens: 5}")
    result = CliRunner().invoke(main, ["validate", "-c", str(path)])
    assert result.exit_code == 0, result.output  # a warning, not an error: the param is still sent
    lines = [line for line in result.stderr.splitlines() if "temprature" in line]
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith("warning: ")
    assert "evalconfig.yaml:11 targets[0].params.temprature:" in line
    assert "(did you mean 'temperature'?)" in line
    assert "openai.yaml:" in line  # where the known params are listed
    assert "max_tokens" not in line


@pytest.mark.parametrize(
    ("provider", "params", "typo", "meant"),
    [
        ("anthropic", "{max_tokens: 5, top_kk: 3}", "top_kk", "top_k"),
        ("ollama", "{num_ctxx: 4096}", "num_ctxx", "num_ctx"),
        ("openai", "{stop_sequence: [x]}", "stop_sequence", None),
    ],
)
def test_each_shipped_definition_lists_its_params(tmp_path: Path, provider: str, params: str, typo: str, meant: str | None) -> None:
    path = project(tmp_path, provider, params)
    config = load_config(path)
    [warning] = config.warnings
    assert warning.path == f"targets[0].params.{typo}"
    assert ("did you mean" in warning.message) == (meant is not None)
    if meant:
        assert f"'{meant}'" in warning.message


def test_known_params_and_the_stream_switch_warn_about_nothing(tmp_path: Path) -> None:
    params = "{temperature: 0, max_tokens: 64, top_p: 1, seed: 7, stream: false, response_format: {type: json_object}}"
    assert load_config(project(tmp_path, "openai", params)).warnings == []


def test_a_definition_without_a_params_list_checks_nothing(tmp_path: Path) -> None:
    providers = tmp_path / "providers"
    providers.mkdir()
    text = (data_dir("providers") / "openai.yaml").read_text(encoding="utf-8").replace("name: openai", "name: mine")
    start = text.index("\nparams: [")
    end = text.index("]\n", start) + 2
    (providers / "mine.yaml").write_text(text[:start] + "\n" + text[end:], encoding="utf-8")
    assert find_provider("mine", providers).known_params is None
    config = load_config(project(tmp_path, "mine", "{temprature: 0.2}", extra="providers_dir: providers"))
    assert config.warnings == []


def test_evalx_run_shows_the_warning_too_and_still_sends_the_param(tmp_path: Path, server: StreamServer) -> None:
    path = project(tmp_path, "openai", "{temprature: 0.2}", base_url=f"{server.url}/v1")
    result = CliRunner().invoke(main, ["run", "-c", str(path)])
    assert result.exit_code == 0, result.output
    assert "targets[0].params.temprature" in result.stderr and "did you mean 'temperature'" in result.stderr
    assert server.requests[-1]["body"]["temprature"] == 0.2


def test_every_shipped_definition_has_a_params_list_without_duplicates() -> None:
    for name in ("openai", "anthropic", "ollama"):
        known = find_provider(name).known_params
        assert known is not None and len(known) == len(set(known)), name
        assert "temperature" in known and "max_tokens" in known


def test_a_typo_in_a_matrix_axis_or_include_is_a_warning_too(tmp_path: Path) -> None:
    path = project(tmp_path, "openai", "{max_tokens: 5}")
    path.write_text(
        path.read_text(encoding="utf-8")
        + "matrix:\n  params:\n    temprature: [0, 1]\n    model: [a, b]\n  include:\n    - {model: a, top_pp: 0.5}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["validate", "-c", str(path)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert any("matrix.params.temprature:" in w and "(did you mean 'temperature'?)" in w for w in warnings), warnings
    assert any("matrix.include[0].top_pp:" in w and "(did you mean 'top_p'?)" in w for w in warnings), warnings
    assert not any(".model" in w for w in warnings)
