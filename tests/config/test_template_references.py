"""`evalx validate` and `evalx run` check the names and fields templates read against the cases; a render names the missing field."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_project import evalx
from conftest import ENGINE_TEST_KEY


def _evalx(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return evalx(*args, cwd=cwd, env=env)


def _project(tmp_path: Path, body: str, url: str = "http://127.0.0.1:9", extra: str = "") -> Path:
    (tmp_path / "evalconfig.yaml").write_text(
        f"""version: 1
vars: {{tone: polite}}
targets:
  - id: agent
    type: engine
    url: {url}
    api_key: ${{ENGINE_KEY:-none}}
    body:
{body}
datasets:
  - id: golden
    path: golden.jsonl
{extra}"""
    )
    (tmp_path / "golden.jsonl").write_text(
        '{"id": "a", "input": "hello", "metadata": {"team": "x"}, "assert": [{"type": "completed"}]}\n'
        '{"id": "b", "input": "hello", "assert": [{"type": "completed"}]}\n'
    )
    return tmp_path


def test_a_typo_in_a_case_field_fails_validate_and_run_with_one_line(tmp_path: Path) -> None:
    project = _project(tmp_path, '      message: "Q: {{ case.inptu }}"')
    line = "evalconfig.yaml:9 targets[0].body.message: unknown field 'inptu' (did you mean 'input'?)"
    validated = _evalx(project, "validate")
    assert (validated.returncode, validated.stderr.strip()) == (2, line)
    ran = _evalx(project, "run")
    assert (ran.returncode, ran.stderr.strip()) == (2, line)
    assert not (project / "runs").exists() or not list((project / "runs").iterdir()), "nothing ran"


def test_unknown_vars_names_and_target_fields(tmp_path: Path) -> None:
    body = '      message: "{{ vars.tne }} {{ cas.input }} {{ target.urll }}"'
    proc = _evalx(_project(tmp_path, body), "validate")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "evalconfig.yaml:9 targets[0].body.message: unknown var 'tne' (did you mean 'tone'?)",
        "evalconfig.yaml:9 targets[0].body.message: unknown name 'cas' (did you mean 'case'?) "
        "(a template here sees case, vars, target, env, repeat, task_id, run_id, turn)",
        "evalconfig.yaml:9 targets[0].body.message: unknown target field 'urll' (did you mean 'url'?)",
    ]


def test_guarded_references_and_known_fields_validate(tmp_path: Path) -> None:
    body = (
        "      message: \"{{ case.input }} {{ case.metadata.lang | default('en') }} {{ vars.tone }}"
        "{% if 'team' in case.metadata %} {{ case.metadata.team }}{% endif %}"
        "{% for t in case.tags %}{{ t.upper() }}{% endfor %} {{ case.get('x') }}\""
    )
    proc = _evalx(_project(tmp_path, body), "validate")
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr


def test_a_judge_prompt_name_is_checked(tmp_path: Path) -> None:
    extra = "judge:\n  target: agent\n  prompt: 'Grade {{ outptu }} against {{ case.expected }}'\n"
    proc = _evalx(_project(tmp_path, '      message: "{{ case.input }}"', extra=extra), "validate")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("evalconfig.yaml:15 judge.prompt: unknown name 'outptu' (did you mean 'output'?)"), proc.stderr


def test_a_field_some_cases_lack_warns_and_the_render_error_lists_the_fields(tmp_path: Path, engine_server) -> None:  # type: ignore[no-untyped-def]
    project = _project(tmp_path, '      message: "{{ case.input }} for {{ case.metadata.team }}"', url=engine_server.url)
    validated = _evalx(project, "validate")
    assert validated.returncode == 0, validated.stderr
    assert (
        "warning: evalconfig.yaml:9 targets[0].body.message: 1 of 2 cases lack the field 'metadata.team' "
        "(the first: golden.jsonl:2 case 'b'); its cells will error"
    ) in validated.stderr
    ran = _evalx(project, "run", "--json", "-q", env={"ENGINE_KEY": ENGINE_TEST_KEY})
    cells = {
        c["case_id"]: c
        for line in next((project / "runs").iterdir()).joinpath("results.jsonl").read_text().splitlines()
        if (c := json.loads(line)).get("case_id")
    }
    assert cells["a"]["status"] == "pass", cells["a"]
    assert cells["b"]["error"] == "body: template error: unknown field 'case.metadata.team' (case.metadata is empty)"
    assert ran.returncode != 0


def test_validate_knows_the_names_a_target_template_renders_with() -> None:
    from evalx.models import Case, Cell
    from evalx.targets import TEMPLATE_NAMES, RunContext
    from evalx.targets.base import template_context

    cell = Cell(index=0, target="t", dataset="d", case=Case(id="a", input="x"), repeat=0)
    from evalx.targets.spec import PythonTargetSpec

    entry = PythonTargetSpec(id="t", type="python", callable="m:f")
    context = template_context(cell, RunContext(run_id="r", config_dir=Path(".")), entry, {"id": "t"})
    assert set(context) | {"turn"} == set(TEMPLATE_NAMES)  # `turn`: an engine body's, in a conversation


def test_prompt_axes_dataset_defaults_and_case_systems_are_checked_too(tmp_path: Path) -> None:
    """Every place a template renders: a matrix's prompt axes (inline and from a file), a dataset's defaults.system and a
    case's own system (at the case's line), by validate and by the run they would fail; a --matrix-free run skips the axes."""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "terse.md").write_text("Be terse. {{ case.inptu }}\n")
    (tmp_path / "cases.yaml").write_text("- id: a\n  input: hello\n  system: 'Own {{ case.metdata.x }}'\n- id: b\n  input: bye\n")
    (tmp_path / "evalconfig.yaml").write_text(
        """version: 1
targets:
  - {id: gpt, type: provider, provider: openai, model: gpt-4o-mini, base_url: "http://127.0.0.1:9/v1", api_key: k}
datasets:
  - id: d
    path: cases.yaml
    defaults: {system: "Defaults {{ case.catgory }}"}
matrix:
  targets: [gpt]
  params:
    prompt: [{label: a, value: "A {{ case.inptu }}"}, {label: b, value: "B {{ case.input }}"}]
    system_file: [prompts/terse.md]
"""
    )
    axes = [
        "evalconfig.yaml:11 matrix.params.prompt[0].value: unknown field 'inptu' (did you mean 'input'?)",
        "evalconfig.yaml:12 matrix.params.system_file[0].value: system_file prompts/terse.md: unknown field 'inptu' (did you mean 'input'?)",
    ]
    systems = [
        "evalconfig.yaml:7 datasets[0].defaults.system: unknown field 'catgory' (did you mean 'category'?)",
        "cases.yaml:1 system: case 'a': unknown field 'metdata' (did you mean 'metadata'?)",
    ]
    validated = _evalx(tmp_path, "validate")
    assert (validated.returncode, validated.stderr.strip().splitlines()) == (2, axes + systems)
    ran = _evalx(tmp_path, "run", "--matrix")
    assert (ran.returncode, ran.stderr.strip().splitlines()) == (2, axes + systems)
    plain = _evalx(tmp_path, "run")
    assert (plain.returncode, plain.stderr.strip().splitlines()) == (2, systems)


def test_braces_where_nothing_renders_them_are_a_warning(tmp_path: Path) -> None:
    """`{{ ... }}` in an assertion's value, a rubric or a header is compared or sent as written: validate says so."""
    (tmp_path / "agent.py").write_text("def answer(q):\n    return q\n")
    (tmp_path / "more.jsonl").write_text(
        '{"id": "x", "input": "q", "assert": [{"type": "llm_judge", "rubric": "mentions {{ case.metadata.kw }}"}]}\n'
    )
    (tmp_path / "evalconfig.yaml").write_text(
        """version: 1
targets:
  - {id: bot, type: python, callable: agent.py:answer, description: "answers {{ like this }}"}
  - {id: eng, type: engine, url: "http://127.0.0.1:9", headers: {X-Case: "{{ case.id }}"}, body: {q: "{{ case.input }}"}}
datasets:
  - id: d
    cases:
      - {id: a, input: q1, metadata: {kw: q1}, assert: [{type: contains, value: "{{ case.metadata.kw }}"}]}
  - id: e
    path: more.jsonl
"""
    )
    proc = _evalx(tmp_path, "validate")
    assert proc.returncode == 0, proc.stderr
    rest = "is used as written, not rendered: only a target's prompt, system, messages, params and body, and judge prompts, are templates"
    warnings = [line for line in proc.stderr.splitlines() if "used as written" in line]
    assert warnings == [
        f"warning: evalconfig.yaml:4 targets[1].headers.X-Case: '{{{{ case.id }}}}' {rest}",
        f"warning: evalconfig.yaml:8 assert: case 'a': assert contains: '{{{{ case.metadata.kw }}}}' {rest}",
        f"warning: more.jsonl:1 assert: case 'x': assert llm_judge: 'mentions {{{{ case.metadata.kw }}}}' {rest}",
    ]
