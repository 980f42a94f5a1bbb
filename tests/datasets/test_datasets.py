"""Dataset loading: every format, every shorthand, file:line sources, exact error texts."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from evalx import DatasetError
from evalx.common.documents import load_yaml
from evalx.datasets.loader import CASE_FIELDS, CASE_SCHEMA, MAX_ERRORS, case_schema_document, load_dataset
from evalx.models import Case
from evalx.results.store import read_results

DATA = Path(__file__).parents[1] / "data" / "datasets"
ROOT = Path(__file__).parents[2]


def load(path: str, **spec: Any) -> list[Case]:
    return load_dataset({"id": "ds", "path": path, **spec}, base_dir=DATA)


def error_of(path: str, **spec: Any) -> str:
    with pytest.raises(DatasetError) as info:
        load(path, **spec)
    return str(info.value)


def by_id(cases: list[Case]) -> dict[str, Case]:
    return {c.id: c for c in cases}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------- formats and shorthands


def test_golden_qa_json_maps_question_answer_and_tolerance() -> None:
    cases = load("golden_qa.json")
    assert [c.id for c in cases] == ["capital-france", "compound-interest", "why-sky-blue"]
    france, interest, sky = cases
    assert france.input == "What is the capital of France?"
    assert france.expected == "Paris"
    assert france.category == "geography"
    assert france.notes == "Sanity check: the simplest possible case."
    assert [c.asserts for c in cases] == [
        [{"type": "equals", "normalize": ["whitespace", "lower"]}],
        [{"type": "numeric_close"}],
        [{"type": "semantic_similar", "threshold": 0.8}],
    ]
    assert interest.difficulty == "medium"
    # the published format's defaults
    assert (sky.category, sky.difficulty) == ("general", "easy")
    assert all(c.dataset == "ds" for c in cases)


def test_json_list_sources_point_at_each_multi_line_element() -> None:
    assert [c.source for c in load("golden_qa.json")] == ["golden_qa.json:2", "golden_qa.json:11", "golden_qa.json:20"]


def test_engine_harness_directory_one_json_file_a_case() -> None:
    cases = load("engine_cases")  # README.txt in the folder is not a case file
    assert [c.id for c in cases] == ["eval-2026-04-001", "eval-2026-04-002"]
    first, second = cases
    assert first.input == {"message": "Find the latest release notes for httpx", "agent": "researcher"}
    assert first.expected is None
    assert first.category == "research"
    assert first.asserts == [
        {"type": "must_call_tools", "tools": ["web_search"]},
        {"type": "must_not_call_tools", "tools": ["shell"]},
        {"type": "contains_all", "values": ["httpx", "release"]},
        {"type": "max_tokens", "value": 8000},
    ]
    assert second.asserts == [{"type": "contains_all", "values": ["billing"]}]
    assert [c.source for c in cases] == ["engine_cases/2026-04-001.json:1", "engine_cases/2026-04-002.json:1"]


def test_golden_trajectories_yaml() -> None:
    weather, plain = load("trajectories.yaml")
    assert weather.input == "What's the weather in Lisbon?"
    assert weather.system == "You are a helpful assistant."
    assert weather.description == "Answers a weather question with the weather tool"
    assert weather.asserts == [
        {"type": "must_call_tools", "tools": ["get_weather"]},
        {"type": "must_not_call_tools", "tools": ["web_search", "shell"]},
        {"type": "max_tokens", "value": 4000, "count": "total"},
        {"type": "max_iterations", "value": 5},
    ]
    assert plain.asserts == [{"type": "must_not_call_tools", "tools": ["calculator"]}]
    assert plain.difficulty is None  # the golden_qa default applies to golden_qa cases only
    assert [weather.source, plain.source] == ["trajectories.yaml:2", "trajectories.yaml:11"]


def test_keywords_characteristics_and_mock_elements() -> None:
    hello, modify = load("keywords.json")
    assert hello.asserts == [
        {"type": "contains_all", "values": ["hello"]},
        {"type": "llm_judge", "characteristics": ["at least one rectangle exists", "the rectangle has a text label"]},
    ]
    assert (hello.difficulty, hello.category, hello.expected) == ("simple", "content", None)
    assert modify.asserts == [
        {"type": "contains_all", "values": ["red"]},
        {"type": "llm_judge", "characteristics": ["the existing element changes colour, nothing else"]},
    ]
    assert modify.expected == {"strokeColor": "red"}  # expectedOutput
    assert modify.difficulty == "edge"
    assert modify.metadata == {"mockElements": [{"type": "rectangle", "id": "box-1"}]}
    assert [hello.source, modify.source] == ["keywords.json:2", "keywords.json:11"]


def test_jsonl_skips_blank_and_comment_lines_and_stringifies_ids() -> None:
    arithmetic, hi = load("cases.jsonl")
    assert arithmetic.asserts == [{"type": "numeric_close"}]
    assert arithmetic.expected == "4"
    assert hi.id == "7"
    assert (hi.tags, hi.threshold, hi.repeat) == (["greeting"], 0.5, 3)
    assert [arithmetic.source, hi.source] == ["cases.jsonl:2", "cases.jsonl:5"]


def test_csv_columns_json_cells_lists_numbers_and_multi_line_rows() -> None:
    one, two, three = load("cases.csv")
    assert (one.id, one.input, one.expected, one.category) == ("csv-1", "What is 2 + 2?", "4", "math")
    assert one.tags == ["quick", "arith"]
    assert one.asserts == [{"type": "numeric_close"}]
    assert (one.threshold, one.repeat) == (0.8, 2)
    assert two.input == 'Say "hello"\non two lines'
    assert two.tags == ["a", "b"]
    assert two.vars == {"name": "Ada"}
    assert (two.expected, two.threshold, two.repeat) == (None, None, None)  # empty cells are absent
    assert three.input == "[INST] not json"  # text that only looks like JSON stays text
    assert three.expected == {"a": 1}
    assert [c.source for c in (one, two, three)] == ["cases.csv:2", "cases.csv:3", "cases.csv:5"]


def test_own_asserts_come_before_shorthand_asserts(tmp_path: Path) -> None:
    write(
        tmp_path,
        "c.yaml",
        """
        - id: mixed
          user_message: hi
          assert: [{type: completed}]
          required_tools: [search]
          expectedKeywords: [hello]
        - id: engine-and-qa
          input: {message: hi}
          expected: {max_tokens: 10, must_not_call_tools: [shell]}
          max_iterations: 3
    """,
    )
    mixed, engine = load_dataset({"id": "x", "path": "c.yaml"}, base_dir=tmp_path)
    assert mixed.asserts == [
        {"type": "completed"},
        {"type": "must_call_tools", "tools": ["search"]},
        {"type": "contains_all", "values": ["hello"]},
    ]
    assert engine.asserts == [
        {"type": "must_not_call_tools", "tools": ["shell"]},
        {"type": "max_tokens", "value": 10},
        {"type": "max_iterations", "value": 3},
    ]


def test_expected_mapping_without_engine_keys_stays_expected(tmp_path: Path) -> None:
    write(tmp_path, "c.json", '{"id": "j", "input": "give json", "expected": {"a": 1}, "assert": [{"type": "is_json"}]}')
    (case,) = load_dataset({"id": "x", "path": "c.json"}, base_dir=tmp_path)
    assert case.expected == {"a": 1}
    assert case.asserts == [{"type": "is_json"}]


def test_snake_case_expected_output_and_keywords(tmp_path: Path) -> None:
    write(tmp_path, "c.jsonl", '{"id": "s", "input": "x", "expected_output": "y", "expected_keywords": ["y"]}\n')
    (case,) = load_dataset({"id": "x", "path": "c.jsonl"}, base_dir=tmp_path)
    assert case.expected == "y"
    assert case.asserts == [{"type": "contains_all", "values": ["y"]}]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("wrapped.json", '{"cases": [\n  {"id": "a", "input": "x"},\n\n  {"id": "b", "input": "y"}\n]}\n'),
        ("wrapped.yaml", "cases:\n  - id: a\n    input: x\n  - id: b\n    input: y\n"),
        ("list.yml", "# comment\n- id: a\n  input: x\n- {id: b, input: y}\n"),
    ],
)
def test_json_and_yaml_shapes(tmp_path: Path, name: str, text: str) -> None:
    write(tmp_path, name, text)
    cases = load_dataset({"id": "x", "path": name}, base_dir=tmp_path)
    assert [(c.id, c.input) for c in cases] == [("a", "x"), ("b", "y")]
    assert [c.source for c in cases] == [f"{name}:2", f"{name}:4"]


def test_json_positions_ignore_brackets_and_quotes_inside_strings(tmp_path: Path) -> None:
    write(
        tmp_path,
        "tricky.json",
        r"""
        [
          {"id": "a", "input": "[{\"not\": \"a case\"}]\n,{", "metadata": {"nested": [1, {"x": [ ]}]}},


          {
            "id": "b",
            "input": "ok"
          },
          {"id": "c", "input": "\u00e9]}"}
        ]
    """,
    )
    cases = load_dataset({"id": "x", "path": "tricky.json"}, base_dir=tmp_path)
    assert [c.source for c in cases] == ["tricky.json:2", "tricky.json:5", "tricky.json:9"]
    assert cases[2].input == "é]}"


def test_dataset_targets_are_copied_onto_each_case_unless_the_case_names_its_own(tmp_path: Path) -> None:
    write(
        tmp_path,
        "c.yaml",
        """
        - {id: a, input: x}
        - {id: b, input: y, targets: [mini]}
    """,
    )
    a, b = load_dataset({"id": "x", "path": "c.yaml", "targets": ["engine-prod"]}, base_dir=tmp_path)
    assert a.targets == ["engine-prod"]
    assert b.targets == ["mini"]
    (plain,) = load("cases.jsonl")[:1]
    assert plain.targets is None


def test_each_datasets_targets_hold_in_a_run_of_several_datasets(tmp_path: Path) -> None:
    """Two datasets naming different targets: each case runs on its own dataset's targets, not the first dataset's."""
    from click.testing import CliRunner

    from evalx.cli import main

    (tmp_path / "agent.py").write_text("def a(q):\n    return 'a'\n\ndef b(q):\n    return 'b'\n")
    (tmp_path / "evalconfig.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            targets:
              - {id: ta, type: python, callable: "agent.py:a"}
              - {id: tb, type: python, callable: "agent.py:b"}
            datasets:
              - {id: one, targets: [ta], cases: [{id: x, input: q, assert: [{type: equals, value: a}]}]}
              - {id: two, targets: [tb], cases: [{id: y, input: q, assert: [{type: equals, value: b}]}]}
            """
        )
    )
    res = CliRunner().invoke(main, ["run", "-c", str(tmp_path / "evalconfig.yaml"), "-q"])
    assert res.exit_code == 0, res.output  # a case on the other dataset's target would fail its equals check
    (run_dir,) = (tmp_path / "runs").iterdir()
    cells = sorted((c["target"], c["dataset"], c["case_id"]) for c in read_results(run_dir / "results.jsonl"))
    assert cells == [("ta", "one", "x"), ("tb", "two", "y")]


def test_defaults_merge_under_each_case(tmp_path: Path) -> None:
    write(
        tmp_path,
        "c.yaml",
        """
        - {id: a, input: x}
        - {id: b, input: y, category: special, tags: [slow], vars: {lang: pt}, assert: [{type: contains, value: y}]}
    """,
    )
    spec = {
        "id": "x",
        "path": "c.yaml",
        "defaults": {
            "category": "smoke",
            "difficulty": "hard",
            "tags": ["quick"],
            "vars": {"lang": "en", "tone": "dry"},
            "assert": [{"type": "completed"}],
        },
    }
    a, b = load_dataset(spec, base_dir=tmp_path)
    assert (a.category, a.difficulty, a.tags, a.vars) == ("smoke", "hard", ["quick"], {"lang": "en", "tone": "dry"})
    assert a.asserts == [{"type": "completed"}]
    assert (b.category, b.tags, b.vars) == ("special", ["quick", "slow"], {"lang": "pt", "tone": "dry"})
    assert b.asserts == [{"type": "completed"}, {"type": "contains", "value": "y"}]
    a.asserts.append({"type": "is_json"})
    assert b.asserts[0] == {"type": "completed"}  # no list shared between cases


CONFIG = """\
version: 1
datasets:
  - id: golden
    path: golden_qa.json
  - id: smoke
    targets: [mini]
    defaults:
      category: smoke
    cases:
      - id: arithmetic
        input: "What is 2 + 2?"
        expected: "4"
        assert: [{type: numeric_close}]
      - id: typo
        input: hi
        expectd: hello
        assert:
          - {type: containz, value: hello}
"""


def parse_yaml_with_lines(text: str) -> tuple[Any, Any]:
    loaded = load_yaml(text, "evalconfig.yaml", interpolate=False)
    return loaded.data, loaded.lines


def test_inline_cases_report_config_lines() -> None:
    data, positions = parse_yaml_with_lines(CONFIG)
    spec = dict(data["datasets"][1])
    spec["cases"] = spec["cases"][:1]
    (case,) = load_dataset(spec, base_dir=DATA, positions=positions, path_prefix=("datasets", 1), line=5)
    assert case.source == "evalconfig.yaml:10"
    assert (case.dataset, case.category, case.targets) == ("smoke", "smoke", ["mini"])
    assert case.asserts == [{"type": "numeric_close"}]


def test_inline_case_errors_name_config_file_line_and_key_path() -> None:
    data, positions = parse_yaml_with_lines(CONFIG)
    with pytest.raises(DatasetError) as info:
        load_dataset(data["datasets"][1], base_dir=DATA, positions=positions, path_prefix=("datasets", 1), line=5)
    assert str(info.value) == "\n".join(
        [
            "evalconfig.yaml:16 datasets[1].cases[1].expectd: unknown field 'expectd' (did you mean 'expected'?); or map it with fields:, or set extra: vars | metadata on the dataset",
            "evalconfig.yaml:18 datasets[1].cases[1].assert[0].type: unknown assertion type 'containz' (did you mean 'contains'?)",
        ]
    )


def test_inline_cases_without_positions() -> None:
    (case,) = load_dataset({"id": "s", "cases": [{"id": "a", "input": "x"}]}, base_dir=DATA, config_file="sub/evalconfig.yaml")
    assert case.source == "sub/evalconfig.yaml"


# ---------------------------------------------------------------------------- errors


def test_invalid_jsonl_reports_every_bad_line() -> None:
    assert error_of("bad/invalid.jsonl") == "\n".join(
        [
            "bad/invalid.jsonl:2: invalid JSON: Expecting ',' delimiter (column 17)",
            "bad/invalid.jsonl:4: invalid JSON: Expecting value (column 29)",
        ]
    )


def test_invalid_json() -> None:
    assert error_of("bad/invalid.json") == "bad/invalid.json:3: invalid JSON: Expecting ',' delimiter (column 14)"


def test_json_is_not_read_as_yaml(tmp_path: Path) -> None:
    write(tmp_path, "yamlish.json", "- id: a\n  input: x\n")
    with pytest.raises(DatasetError, match=r"^yamlish.json:1: invalid JSON: Expecting value \(column 1\)$"):
        load_dataset({"id": "x", "path": "yamlish.json"}, base_dir=tmp_path)


def test_invalid_yaml() -> None:
    assert error_of("bad/invalid.yaml") == (
        "bad/invalid.yaml:4: invalid YAML: a '[' opened on this line is not closed: close it with ']' on this line, or write it as an indented block"
    )


def test_unknown_fields_and_assertion_errors_with_key_paths() -> None:
    assert error_of("bad/golden.json") == "\n".join(
        [
            "bad/golden.json:8 cases[3].expectd: unknown field 'expectd' (did you mean 'expected'?); or map it with fields:, or set extra: vars | metadata on the dataset",
            "bad/golden.json:11 cases[3].assert[1].type: unknown assertion type 'containz' (did you mean 'contains'?)",
            "bad/golden.json:12 cases[3].assert[2].value: 'many' is not of type 'integer'",
            "bad/golden.json:13 cases[3].assert[3].valu: unknown field 'valu' (did you mean 'value'?)",
            "bad/golden.json:14 cases[3].assert[4]: 'type' is a required property",
            "bad/golden.json:15 cases[3].assert[5]: an assertion must be a mapping, not a string",
        ]
    )


def test_duplicate_ids_name_the_first_occurrence() -> None:
    assert error_of("bad/duplicates.jsonl") == "\n".join(
        [
            "bad/duplicates.jsonl:3 cases[2].id: case id 'foo' is used twice (first at bad/duplicates.jsonl:1)",
            "bad/duplicates.jsonl:5 cases[4].id: case id '1' is used twice (first at bad/duplicates.jsonl:4)",
        ]
    )


def test_duplicate_ids_across_files_of_a_directory(tmp_path: Path) -> None:
    write(tmp_path, "d/a.json", '{"id": "same", "input": "x"}')
    write(tmp_path, "d/b.yaml", "# one case a file\n\nid: same\ninput: y\n")
    with pytest.raises(DatasetError) as info:
        load_dataset({"id": "x", "path": "d"}, base_dir=tmp_path)
    assert str(info.value) == "d/b.yaml:3 id: case id 'same' is used twice (first at d/a.json:1)"


def test_shorthand_errors() -> None:
    assert error_of("bad/shorthands.yaml") == "\n".join(
        [
            "bad/shorthands.yaml:3 cases[0].question: 'question' and 'input' cannot both be given",
            "bad/shorthands.yaml:8 cases[1].expected.must_not_cal_tools: unknown field 'must_not_cal_tools'"
            " in an Engine-harness 'expected' (did you mean 'must_not_call_tools'?)",
            "bad/shorthands.yaml:11 cases[2].expected.max_tokens: 'lots' is not of type 'integer'",
            "bad/shorthands.yaml:14 cases[3].tolerance: 'tolerance' needs an 'expected_answer' to compare with",
            "bad/shorthands.yaml:18 cases[4].tolerance: 'fuzzy' is not one of ['exact_match', 'numeric_close', 'semantic_similar']",
            "bad/shorthands.yaml:21 cases[5].required_tools: 'search' is not of type 'array'",
            "bad/shorthands.yaml:22 cases[6]: 'id' is a required property",
            "bad/shorthands.yaml:23 cases[7]: 'input' is a required property",
            "bad/shorthands.yaml:24 cases[8]: a case must be a mapping, not a string",
        ]
    )


def test_csv_errors() -> None:
    assert error_of("bad/bad.csv") == "\n".join(
        [
            "bad/bad.csv:1 expectd: unknown field 'expectd' (did you mean 'expected'?); or map it with fields:, or set extra: vars | metadata on the dataset",
            "bad/bad.csv:3 cases[1].assert: invalid JSON: Expecting ',' delimiter (column 22)",
        ]
    )


def test_wrong_top_level_shape() -> None:
    assert error_of("bad/scalar.json") == "bad/scalar.json:1: expected a list of cases, one case or {cases: [...]}, not a string"


def test_errors_are_capped() -> None:
    lines = error_of("bad/many.jsonl").split("\n")
    assert len(lines) == MAX_ERRORS + 1
    assert (
        lines[0]
        == "bad/many.jsonl:1 cases[0].inptu: unknown field 'inptu' (did you mean 'input'?); or map it with fields:, or set extra: vars | metadata on the dataset"
    )
    assert lines[1] == "bad/many.jsonl:1 cases[0]: 'input' is a required property"
    assert lines[-1] == "... and 30 more"


def test_missing_file() -> None:
    assert error_of("examples/x.jsonl") == "evalconfig.yaml: missing dataset file examples/x.jsonl"


def test_missing_file_names_the_config_line_and_key() -> None:
    with pytest.raises(DatasetError) as info:
        load_dataset({"id": "x", "path": "examples/x.jsonl"}, base_dir=DATA, line=14, path_prefix=("datasets", 2))
    assert str(info.value) == "evalconfig.yaml:14 datasets[2].path: missing dataset file examples/x.jsonl"


def test_unsupported_format_and_empty_directory(tmp_path: Path) -> None:
    assert error_of("bad/notes.txt") == (
        "evalconfig.yaml: unsupported dataset format '.txt' in bad/notes.txt (use .jsonl, .json, .yaml, .yml, .csv or a directory)"
    )
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError) as info:
        load_dataset({"id": "x", "path": "empty"}, base_dir=tmp_path)
    assert str(info.value) == "evalconfig.yaml: no case files (.json, .jsonl, .yaml, .yml, .csv) in directory empty"


def test_bad_defaults_are_reported_once() -> None:
    spec = {"id": "x", "path": "cases.jsonl", "defaults": {"categroy": "a", "assert": [{"type": "contans"}]}}
    _, positions = parse_yaml_with_lines(yaml.safe_dump({"datasets": [spec]}, sort_keys=False))
    with pytest.raises(DatasetError) as info:
        load_dataset(spec, base_dir=DATA, positions=positions, path_prefix=("datasets", 0))
    assert str(info.value) == "\n".join(
        [
            "evalconfig.yaml:5 datasets[0].defaults.categroy: unknown field 'categroy' (did you mean 'category'?)",
            "evalconfig.yaml:7 datasets[0].defaults.assert[0].type: unknown assertion type 'contans' (did you mean 'contains'?)",
        ]
    )


def test_wrong_field_types_and_ranges(tmp_path: Path) -> None:
    write(
        tmp_path,
        "c.jsonl",
        """
        {"id": "a", "input": ["not", "text"], "threshold": 1.5, "repeat": 0, "tags": "x"}
        {"id": "", "input": "x"}
    """,
    )
    with pytest.raises(DatasetError) as info:
        load_dataset({"id": "x", "path": "c.jsonl"}, base_dir=tmp_path)
    assert sorted(str(info.value).split("\n")) == [
        "c.jsonl:1 cases[0].input[0]: 'not' is not of type 'object'",
        "c.jsonl:1 cases[0].input[1]: 'text' is not of type 'object'",
        "c.jsonl:1 cases[0].repeat: 0 is less than the minimum of 1",
        "c.jsonl:1 cases[0].tags: 'x' is not of type 'array'",
        "c.jsonl:1 cases[0].threshold: 1.5 is greater than the maximum of 1",
        "c.jsonl:2 cases[1].id: '' should be non-empty",
    ]


# ---------------------------------------------------------------------------- schema


def test_case_fields_include_every_shorthand() -> None:
    for name in (
        "id",
        "input",
        "assert",
        "system",
        "user_message",
        "question",
        "expected_answer",
        "tolerance",
        "required_tools",
        "forbidden_tools",
        "max_tokens",
        "max_iterations",
        "expectedKeywords",
        "expected_keywords",
        "expectedCharacteristics",
        "expected_characteristics",
        "expectedOutput",
        "expected_output",
        "mockElements",
    ):
        assert name in CASE_FIELDS
    assert set(CASE_SCHEMA["properties"]) == set(CASE_FIELDS)
    assert CASE_SCHEMA["additionalProperties"] is False
    assert CASE_SCHEMA["properties"]["assert"]["items"] == {"$ref": "#/$defs/assertion"}


def test_schema_file_is_current_and_accepts_every_sample_case() -> None:
    on_disk = json.loads((ROOT / "schemas" / "case.schema.json").read_text())
    assert on_disk == case_schema_document()
    Draft202012Validator.check_schema(on_disk)
    validator = Draft202012Validator(on_disk)
    raw_cases = [
        *json.loads((DATA / "golden_qa.json").read_text()),
        *json.loads((DATA / "keywords.json").read_text()),
        *yaml.safe_load((DATA / "trajectories.yaml").read_text()),
        *(json.loads(p.read_text()) for p in sorted((DATA / "engine_cases").glob("*.json"))),
    ]
    for raw in raw_cases:
        assert list(validator.iter_errors(raw)) == [], raw["id"]
    assert not validator.is_valid({"id": "a", "input": "x", "expectd": "y"})


# ---------------------------------------------------------------------------- duplicate keys (one loader: evalx.common.documents)

_TWICE = {
    # a case with `assert:` written twice: last-wins would keep only the passing one
    "cases.yaml": (
        "- id: a\n  input: what is 2+2?\n  assert:\n    - {type: contains, value: '5'}\n  assert:\n    - {type: contains, value: '4'}\n",
        "cases.yaml:5 cases[0].assert: duplicate key 'assert'",
    ),
    "cases.json": (
        '[\n  {"id": "a", "input": "what is 2+2?",\n   "assert": [{"type": "contains", "value": "5"}],\n'
        '   "assert": [{"type": "contains", "value": "4"}]}\n]\n',
        "cases.json:4 cases[0].assert: duplicate key 'assert'",
    ),
    "cases.jsonl": (
        '{"id": "ok", "input": "x", "assert": [{"type": "contains", "value": "4"}]}\n'
        '{"id": "a", "input": "what is 2+2?", "assert": [{"type": "contains", "value": "5"}], "assert": [{"type": "contains", "value": "4"}]}\n',
        "cases.jsonl:2 cases[1].assert: duplicate key 'assert'",
    ),
}


@pytest.mark.parametrize("name", sorted(_TWICE))
def test_a_key_written_twice_in_a_dataset_is_an_error(tmp_path: Path, name: str) -> None:
    text, expected = _TWICE[name]
    (tmp_path / name).write_text(text)
    with pytest.raises(DatasetError) as info:
        load_dataset({"id": "d", "path": name}, base_dir=tmp_path)
    assert str(info.value) == expected


@pytest.mark.parametrize("name", sorted(_TWICE))
def test_validate_and_run_exit_2_on_a_key_written_twice(tmp_path: Path, name: str) -> None:
    from click.testing import CliRunner

    from evalx.cli import main

    text, expected = _TWICE[name]
    (tmp_path / name).write_text(text)
    (tmp_path / "agent.py").write_text("def answer(q):\n    return '4'\n")
    cfg = tmp_path / "evalconfig.yaml"
    cfg.write_text(f"targets: [{{id: bot, type: python, callable: agent.py:answer}}]\ndatasets: [{{id: d, path: {name}}}]\n")
    for command in (["validate"], ["run", "-q"]):
        result = CliRunner().invoke(main, [*command, "-c", str(cfg)])
        assert result.exit_code == 2, (command, result.output)
        assert result.stderr.rstrip("\n").endswith(expected), (command, result.stderr)
        assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*/results.jsonl"))


def test_yaml_merge_keys_override_without_being_duplicates(tmp_path: Path) -> None:
    write(
        tmp_path,
        "cases.yaml",
        """
        - &base {id: a, input: x, category: maths, tags: [t]}
        - <<: *base
          id: b
          category: logic
        - <<: [{id: c, input: first}, {id: z, input: second, difficulty: hard}]
    """,
    )
    cases = load_dataset({"id": "d", "path": "cases.yaml"}, base_dir=tmp_path)
    assert [(c.id, c.input, c.category) for c in cases] == [("a", "x", "maths"), ("b", "x", "logic"), ("c", "first", "general")]
    assert cases[2].difficulty == "hard"  # merged from the second mapping; the first wins where both say
    assert [c.source for c in cases] == ["cases.yaml:1", "cases.yaml:2", "cases.yaml:5"]


def test_json_lines_are_found_lazily_and_deep_ones_only_for_errors(tmp_path: Path) -> None:
    write(
        tmp_path,
        "cases.json",
        """
        {"cases": [
          {"id": "a", "input": "x"},
          {"id": "b", "input": "y",
           "assert": [{"type": "contains", "value": "y"},
                      {"type": "contains", "valeu": "y"}]}
        ]}
    """,
    )
    with pytest.raises(DatasetError) as info:
        load_dataset({"id": "d", "path": "cases.json"}, base_dir=tmp_path)
    assert str(info.value) == "cases.json:5 cases[1].assert[1].valeu: unknown field 'valeu' (did you mean 'value'?)"
