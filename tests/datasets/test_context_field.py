"""A case's ``context``: inline, from ``context_file:`` (relative to the case's file), from a column via ``fields:``.

Loaded through the real loader (``evalx validate`` / ``evalx run`` on a
project written into the test's folder); the context reaches Python targets
(``case["context"]``) and templates (``case.context``); bad input is one
line naming ``FILE:LINE key.path`` with exit 2.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import OPENAI_KEY, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from cli_project import run_cli
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main
from evalx.datasets.loader import load_dataset
from evalx.datasets.table import _CONTENT, _LATER, DIGEST_SIZE, case_digest
from evalx.models import Case

ECHO = "import json\ndef answer(q, case):\n    return json.dumps(case.get('context'))\n"


def project(root: Path, datasets: str, files: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.py").write_text(ECHO)
    for name, text in (files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    config = root / "evalconfig.yaml"
    config.write_text(
        "version: 1\ntargets:\n  - {id: bot, type: python, callable: agent.py:answer}\ndatasets:\n"
        + textwrap.indent(textwrap.dedent(datasets), "  ")
    )
    return config


def contexts(run_dir: Path) -> dict[str, Any]:
    return {row["case_id"]: json.loads(row["output"]["text"]) for row in read_cells(run_dir)}


def validate(config: Path) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["validate", "-c", str(config)])
    assert "Traceback" not in res.output
    return res.exit_code, res.output


def test_inline_file_and_defaults_contexts_reach_the_target(tmp_path: Path) -> None:
    files = {
        "data/cases.yaml": textwrap.dedent(
            """\
            - {id: one, input: q, context: "Paris is the capital of France.", assert: [{type: completed}]}
            - {id: many, input: q, context: [first passage, second passage], assert: [{type: completed}]}
            - {id: text-file, input: q, context_file: docs/paris.txt, assert: [{type: completed}]}
            - {id: json-file, input: q, context_file: docs/passages.json, assert: [{type: completed}]}
            - {id: yaml-file, input: q, context_file: ../shared/passages.yaml, assert: [{type: completed}]}
            - {id: none, input: q, assert: [{type: completed}]}
            """
        ),
        "data/docs/paris.txt": "Paris is the capital of France.\nIt lies on the Seine.\n",
        "data/docs/passages.json": '["Passage A", "Passage B"]',
        "shared/passages.yaml": "- from yaml 1\n- from yaml 2\n",
        # a file beside the config with the same name: the case's own folder is where the path starts
        "docs/paris.txt": "the wrong file",
    }
    config = project(
        tmp_path,
        """\
        - {id: files, path: data/cases.yaml}
        - id: inline
          defaults: {context_file: docs/paris.txt}
          cases:
            - {id: from-defaults, input: q, assert: [{type: completed}]}
            - {id: own-wins, input: q, context: own, assert: [{type: completed}]}
        """,
        files,
    )
    assert validate(config)[0] == 0
    code, output, run_dir = run_cli(config)
    assert code == 0, output
    got = contexts(run_dir)
    assert got["one"] == "Paris is the capital of France."
    assert got["many"] == ["first passage", "second passage"]
    assert got["text-file"] == "Paris is the capital of France.\nIt lies on the Seine."  # one passage, the last line end dropped
    assert got["json-file"] == ["Passage A", "Passage B"]
    assert got["yaml-file"] == ["from yaml 1", "from yaml 2"]
    assert got["none"] is None
    assert got["from-defaults"] == "the wrong file"  # defaults: are in the config: relative to the config's folder
    assert got["own-wins"] == "own"


def test_a_column_through_fields_becomes_the_context(tmp_path: Path) -> None:
    files = {
        "rag.csv": 'question,retrieved_docs\nq1,"[""doc one"", ""doc two""]"\nq2,just one passage\nq3,[1] starts like a list\n',
        "rag.jsonl": json.dumps({"q": "q4", "docs": json.dumps(["j1", "j2"])}) + "\n" + json.dumps({"q": "q5", "docs": ["k1"]}) + "\n",
    }
    config = project(
        tmp_path,
        """\
        - {id: csv, path: rag.csv, fields: {input: question, context: retrieved_docs}, defaults: {assert: [{type: completed}]}}
        - {id: jsonl, path: rag.jsonl, fields: {input: q, context: docs}, defaults: {assert: [{type: completed}]}}
        """,
        files,
    )
    code, output, run_dir = run_cli(config)
    assert code == 0, output
    rows = {(r["dataset"], r["input"]): json.loads(r["output"]["text"]) for r in read_cells(run_dir)}
    assert rows[("csv", "q1")] == ["doc one", "doc two"]
    assert rows[("csv", "q2")] == "just one passage"
    assert rows[("csv", "q3")] == "[1] starts like a list"  # not JSON: text
    assert rows[("jsonl", "q4")] == ["j1", "j2"]  # a JSON list written as text in the column
    assert rows[("jsonl", "q5")] == ["k1"]


@pytest.mark.parametrize(
    ("case", "files", "message"),
    [
        (
            "{id: a, input: q, context_file: docs/nope.txt}",
            {},
            "cases[0].context_file: context_file 'docs/nope.txt': no such file data/docs/nope.txt",
        ),
        (
            "{id: a, input: q, context_file: docs/bad.json}",
            {"data/docs/bad.json": '[\n "ok",\n 5\n]'},
            "cases[0].context_file: context_file 'docs/bad.json': data/docs/bad.json:3 [1]: a passage must be a string, not int",
        ),
        (
            "{id: a, input: q, context_file: docs/broken.json}",
            {"data/docs/broken.json": '["a",'},
            "cases[0].context_file: context_file 'docs/broken.json': data/docs/broken.json:1: invalid JSON",
        ),
        (
            "{id: a, input: q, context_file: docs/map.yaml}",
            {"data/docs/map.yaml": "a: 1\n"},
            "must hold a string or a list of strings (passages), not a mapping",
        ),
        ("{id: a, input: q, context: [x, 5]}", {}, "cases[0].context[1]: 5 is not of type 'string'"),
        ("{id: a, input: q, context: 7}", {}, "cases[0].context: 7 is not of type 'string', 'array'"),
        ("{id: a, input: q, context: x, context_file: docs/a.txt}", {}, "'context' and 'context_file' cannot both be given"),
        ("{id: a, input: q, context_file: ../../outside.txt}", {}, "'..' leads outside the config's folder"),
        ("{id: a, input: q, context_file: /etc/hostname}", {}, "an absolute path; give a path relative to the dataset file's folder"),
    ],
)
def test_bad_contexts_are_one_line_errors_at_file_line(tmp_path: Path, case: str, files: dict[str, str], message: str) -> None:
    config = project(tmp_path, "- {id: d, path: data/cases.yaml}\n", {"data/cases.yaml": f"# rag cases\n- {case}\n", **files})
    code, output = validate(config)
    assert code == 2, output
    assert output.startswith("data/cases.yaml:2 "), output
    assert message in output, output
    assert len(output.strip().splitlines()) == 1


def test_a_column_that_is_not_passages_is_named(tmp_path: Path) -> None:
    files = {"rag.jsonl": json.dumps({"q": "q", "docs": json.dumps([{"text": "x"}])}) + "\n"}
    config = project(tmp_path, "- {id: d, path: rag.jsonl, fields: {input: q, context: docs}}\n", files)
    code, output = validate(config)
    assert code == 2
    assert "rag.jsonl:1 cases[0].context: column 'docs' must hold a string or a JSON list of strings (passages), not a list" in output


def test_templates_see_case_context(tmp_path: Path, server: FakeLLMServer) -> None:
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            targets:
              - id: gpt
                type: provider
                provider: openai
                model: m
                base_url: '{server.url}/v1'
                api_key: {OPENAI_KEY}
                prompt: "Answer from: {{{{ case.context | join(' / ') }}}}. Q: {{{{ case.input }}}}"
            datasets:
              - id: d
                cases:
                  - {{id: a, input: Where is Paris?, context: [Paris is in France., It is on the Seine.], assert: [{{type: completed}}]}}
            """
        )
    )
    code, output, _ = run_cli(config)
    assert code == 0, output
    sent = server.bodies("/v1/chat/completions")[0]["messages"][-1]["content"]
    assert sent == "Answer from: Paris is in France. / It is on the Seine.. Q: Where is Paris?"


def test_a_case_without_context_keeps_its_mapping_and_digest(tmp_path: Path) -> None:
    plain = Case(id="a", input="q", expected="x")
    assert "context" not in plain.to_dict()  # the python target's case= and the cache keys are as before
    # the digest of --resume's fingerprint leaves the later fields out while unset: the same bytes as before they existed
    values = [getattr(plain, name) for name in _CONTENT if name not in _LATER]
    before = hashlib.blake2b(repr(values).encode(), digest_size=DIGEST_SIZE).digest()
    assert case_digest(plain, lambda v: v) == before
    grounded = Case(id="a", input="q", expected="x", context=["p"])
    assert grounded.to_dict()["context"] == ["p"]
    assert case_digest(grounded, lambda v: v) != before


def test_each_context_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "kb.json").write_text('["shared passage"]')
    lines = "".join(json.dumps({"id": str(i), "input": "q", "context_file": "docs/kb.json"}) + "\n" for i in range(50))
    (tmp_path / "cases.jsonl").write_text(lines)
    import evalx.datasets.context as context_module

    reads: list[str] = []
    real = context_module.read_template_file

    def counted(root: Path, name: str, *, what: str = "") -> str:
        reads.append(name)
        return real(root, name, what=what)

    monkeypatch.setattr(context_module, "read_template_file", counted)
    table = load_dataset({"id": "d", "path": "cases.jsonl"}, base_dir=tmp_path)
    assert [case.context for case in table] == [["shared passage"]] * 50
    assert reads == ["docs/kb.json"]
