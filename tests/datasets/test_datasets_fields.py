"""A dataset's ``fields:`` and ``extra:``: files in other tools' shapes run through the CLI as they are (issue 17)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main
from evalx.datasets.loader import load_dataset

HINT = "; or map it with fields:, or set extra: vars | metadata on the dataset"

AGENT = '''
def echo(question, case):
    """Answers with the case's 'language' var (a CSV column) and what it was asked."""
    return f"{case['vars'].get('language')}|{question}|{case['metadata'].get('subject')}"
'''


def project(tmp_path: Path, datasets: str, files: dict[str, str]) -> Path:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\ntargets:\n  - {id: echo, type: python, callable: agent.py:echo}\ndatasets:\n" + textwrap.dedent(datasets).lstrip("\n"),
        encoding="utf-8",
    )
    return config


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # messages name files relative to the working directory


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


PROMPTFOO_CSV = """
    question,answer,language,source
    Say hello,hello,French,web
    "Say bye, then go",bye,German,
"""


def test_a_csv_with_arbitrary_columns_runs_through_fields_and_extra_vars(tmp_path: Path) -> None:
    config = project(
        tmp_path,
        """
        - id: pf
          path: tests.csv
          fields: {input: question, expected: answer}
          extra: vars
          defaults:
            assert: [{type: contains}]
        """,
        {"tests.csv": PROMPTFOO_CSV},
    )
    result = cli("validate", "-c", str(config))
    assert result.exit_code == 0, result.output
    assert "1 datasets, 2 cases" in result.output
    result = cli("run", "-c", str(config))
    assert result.exit_code == 0, result.output
    cells = {c["case_id"]: c for c in read_cells(next((tmp_path / "runs").iterdir()))}
    assert set(cells) == {"1", "2"}  # no id column: each case is its place in the file
    assert cells["1"]["input"] == "Say hello" and cells["1"]["expected"] == "hello"
    assert cells["1"]["output"]["text"] == "French|Say hello|None"  # the target saw the 'language' column as a var
    assert cells["2"]["output"]["text"] == "German|Say bye, then go|None"
    assert cells["1"]["status"] == "pass" and cells["2"]["status"] == "pass"
    assert cells["1"]["case_source"] == "tests.csv:2"


def test_csv_extra_columns_keep_their_text_and_an_empty_cell_is_an_empty_var(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text('q,n,tags,blank\nhi,007,"a,b",\n', encoding="utf-8")
    cases = list(load_dataset({"id": "d", "path": "t.csv", "fields": {"input": "q", "tags": "tags"}, "extra": "vars"}, base_dir=tmp_path))
    assert len(cases) == 1
    assert cases[0].vars == {"n": "007", "blank": ""}  # vars are text, as the file has them
    assert cases[0].tags == ["a", "b"]  # a mapped column is parsed as its field


HF_JSONL = [
    {"question": "What is 2+2?", "answer": "4", "subject": "math", "split": "test"},
    {"question": "Capital of France?", "answer": "Paris", "subject": "geo", "split": "test"},
]


def test_a_jsonl_in_another_tools_shape_runs_through_fields_and_extra_metadata(tmp_path: Path) -> None:
    config = project(
        tmp_path,
        """
        - id: hf
          path: hf.jsonl
          fields: {input: question, expected: answer}
          extra: metadata
          defaults:
            assert: [{type: contains, value: "|"}]
        """,
        {"hf.jsonl": "".join(json.dumps(row) + "\n" for row in HF_JSONL)},
    )
    result = cli("run", "-c", str(config))
    assert result.exit_code == 0, result.output
    cells = {c["case_id"]: c for c in read_cells(next((tmp_path / "runs").iterdir()))}
    assert cells["2"]["output"]["text"] == "None|Capital of France?|geo"
    assert cells["2"]["expected"] == "Paris" and cells["2"]["case_source"] == "hf.jsonl:2"


def test_fields_maps_an_id_and_a_shorthand_and_the_case_own_vars_win(tmp_path: Path) -> None:
    rows = [{"qid": "q-1", "q": "2+2?", "gold": "4", "how": "exact_match", "language": "en", "vars": {"language": "fr"}}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    spec = {
        "id": "d",
        "path": "d.jsonl",
        "fields": {"id": "qid", "question": "q", "expected_answer": "gold", "tolerance": "how"},
        "extra": "vars",
    }
    (case,) = load_dataset(spec, base_dir=tmp_path)
    assert case.id == "q-1" and case.input == "2+2?" and case.expected == "4"
    assert [a["type"] for a in case.asserts] == ["equals"]  # golden_qa's tolerance, read from another column
    assert case.vars == {"language": "fr"}


def test_inline_cases_take_fields_and_extra_too(tmp_path: Path) -> None:
    config = project(
        tmp_path,
        """
        - id: inline
          fields: {input: prompt}
          extra: vars
          cases:
            - {id: a, prompt: hi, language: Dutch, assert: [{type: contains, value: Dutch}]}
        """,
        {},
    )
    result = cli("run", "-c", str(config))
    assert result.exit_code == 0, result.output


def test_a_plain_dataset_reads_as_before_and_an_unknown_column_names_the_options(tmp_path: Path) -> None:
    config = project(
        tmp_path,
        """
        - id: d
          path: d.jsonl
        """,
        {"d.jsonl": '{"id": "a", "input": "x", "expected_contains": "y"}\n'},
    )
    result = cli("validate", "-c", str(config))
    assert result.exit_code == 2
    assert (
        result.output.strip()
        == "d.jsonl:1 cases[0].expected_contains: unknown field 'expected_contains' (did you mean 'expected_answer'?)" + HINT
    )


def test_a_csv_header_column_under_extra_error_is_reported_once_with_the_hint(tmp_path: Path) -> None:
    config = project(
        tmp_path,
        """
        - id: d
          path: d.csv
          fields: {input: question}
        """,
        {"d.csv": "question,answr\nq1,a1\nq2,a2\n"},
    )
    result = cli("validate", "-c", str(config))
    assert result.exit_code == 2
    assert result.output == "d.csv:1 answr: unknown field 'answr'" + HINT + "\n", result.output  # once, not a row


def test_a_mapped_column_no_case_has_is_one_error_at_the_mapping(tmp_path: Path) -> None:
    config = project(
        tmp_path,
        """
        - id: hf
          path: hf.jsonl
          fields:
            input: question
            expected: answr
        """,
        {"hf.jsonl": "".join(json.dumps({k: v for k, v in row.items() if k != "split"}) + "\n" for row in HF_JSONL)},
    )
    for command in ("validate", "run"):
        result = cli(command, "-c", str(config))
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert lines[0] == (
            "evalconfig.yaml:9 datasets[0].fields.expected: column 'answr' appears in no case (did you mean 'answer'?) "
            "(columns seen: answer, question, subject)"
        ), result.output
        # the columns that are neither mapped nor case fields are errors under the default extra: error
        # the columns neither mapped nor case fields are errors under the default extra: error
        assert lines[1:] == [
            f"hf.jsonl:{n} cases[{n - 1}].{column}: unknown field {column!r}{hint}" + HINT
            for n in (1, 2)
            for column, hint in (("answer", " (did you mean 'assert'?)"), ("subject", ""))
        ], result.output
    assert not (tmp_path / "runs").exists()


def test_a_mapped_column_some_cases_lack_names_the_column_in_their_error(tmp_path: Path) -> None:
    rows = [{"id": "a", "question": "q"}, {"id": "b", "prompt": "q"}]
    config = project(
        tmp_path,
        """
        - id: d
          path: d.jsonl
          fields: {input: question}
          extra: metadata
        """,
        {"d.jsonl": "".join(json.dumps(r) + "\n" for r in rows)},
    )
    result = cli("validate", "-c", str(config))
    assert result.exit_code == 2
    assert result.output.strip() == (
        "d.jsonl:2 cases[1]: 'input' is a required property (fields: reads it from column 'question', which this case does not have)"
    )


def test_a_case_field_column_shadowed_by_a_mapping_is_an_error_under_extra_error(tmp_path: Path) -> None:
    config = project(
        tmp_path,
        """
        - id: d
          path: d.jsonl
          fields: {input: question}
        """,
        {"d.jsonl": '{"id": "a", "question": "q", "input": "other"}\n'},
    )
    result = cli("validate", "-c", str(config))
    assert result.exit_code == 2
    assert result.output.strip().startswith("d.jsonl:1 cases[0].input: 'input' is read from column 'question' (fields:), so this column")


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ("fields: {inptu: question}", "evalconfig.yaml:7 datasets[0].fields.inptu: unknown key 'inptu' (did you mean 'input'?)"),
        ("fields: {input: 3}", "evalconfig.yaml:7 datasets[0].fields.input: 3 is not of type 'string'"),
        ("extra: var", "evalconfig.yaml:7 datasets[0].extra: 'var' is not one of ['vars', 'metadata', 'error']"),
    ],
)
def test_a_bad_declaration_is_a_config_error_naming_its_line(tmp_path: Path, declaration: str, message: str) -> None:
    config = project(
        tmp_path,
        f"""
        - id: d
          path: d.jsonl
          {declaration}
        """,
        {"d.jsonl": '{"id": "a", "question": "q"}\n'},
    )
    result = cli("validate", "-c", str(config))
    assert result.exit_code == 2
    assert message in result.output.splitlines(), result.output


def test_the_schema_documents_both_keys() -> None:
    schema = json.loads((Path(__file__).parents[2] / "schemas" / "evalconfig.schema.json").read_text(encoding="utf-8"))
    dataset = schema["$defs"]["dataset"]["properties"]
    assert dataset["extra"]["enum"] == ["vars", "metadata", "error"] and dataset["extra"]["description"]
    assert {"input", "expected", "id", "vars", "question"} <= set(dataset["fields"]["properties"]) and dataset["fields"]["description"]
