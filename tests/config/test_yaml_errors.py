"""A YAML syntax error in a config, a YAML dataset or a provider file is one line: file:line, what is wrong, what to write."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cli_project import evalx

CONFIG = """version: 1
targets:
  - id: bot
    type: provider
    provider: mine
    model: m
    prompt: "{{ case.input }}"
datasets:
  - id: golden
    path: golden.yaml
providers_dir: providers
"""

DATASET = "- id: a\n  input: hi\n  expected: hi\n"

PROVIDER = """name: mine
base_url: http://127.0.0.1:9
request:
  path: /chat
  body: '{"model": {{ model | tojson }}, "messages": {{ messages | tojson }}}'
response:
  text: response.choices[0].message.content
"""


def _validate(folder: Path) -> subprocess.CompletedProcess[str]:
    return evalx("validate", cwd=folder)


def _project(tmp_path: Path, config: str = CONFIG, dataset: str = DATASET, provider: str = PROVIDER) -> Path:
    (tmp_path / "evalconfig.yaml").write_text(config)
    (tmp_path / "golden.yaml").write_text(dataset)
    (tmp_path / "providers").mkdir()
    (tmp_path / "providers" / "mine.yaml").write_text(provider)
    return tmp_path


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_a_tab_in_a_dataset(tmp_path: Path) -> None:
    line = _one_line(_validate(_project(tmp_path, dataset="- id: a\n\tinput: hi\n")))
    assert line == "golden.yaml:2: invalid YAML: a tab (column 1): YAML indents with spaces only; replace the tab with spaces"


def test_an_indentation_mistake_in_a_provider_file(tmp_path: Path) -> None:
    broken = PROVIDER.replace("  body:", " body:")
    line = _one_line(_validate(_project(tmp_path, provider=broken)))
    assert line.startswith("providers/mine.yaml:5: invalid YAML: this line is indented 1 space, but the lines above it 2 (column 2)"), line
    assert "line up the keys" in line


def test_an_unquoted_colon_in_a_config_value(tmp_path: Path) -> None:
    line = _one_line(_validate(_project(tmp_path, config=CONFIG.replace("model: m", "model: gpt: 4"))))
    assert line.startswith("evalconfig.yaml:6: invalid YAML: a second ':' on this line"), line
    assert "quote a value that contains ': '" in line
    assert "mapping values are not allowed here" not in line  # not PyYAML's words


def test_a_provider_file_beside_a_config_without_providers_dir_is_named_in_the_error(tmp_path: Path) -> None:
    folder = _project(tmp_path, config=CONFIG.replace("providers_dir: providers\n", ""))
    proc = _validate(folder)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("evalconfig.yaml:") and "unknown provider 'mine'" in line
    assert line.endswith("(providers/mine.yaml is here: add `providers_dir: providers` to the config)")
