"""Issue 14, `evalx capture`: names unique per trace, and YAML that cannot be injected. Through the CLI (click's CliRunner).

- trace ids that share a prefix (``req-2026-aaa``/``req-2026-bbb``, ``chatcmpl-...``), differ only in case,
  repeat, or are very long each get their own file; a batch never loses one, with or without ``--force``;
- a file name or a field holding a YAML line break (U+2028, U+2029, U+0085), a newline, ``: ``, ``#``, a
  leading indicator, a BOM, NUL or a lone surrogate is written so that reading the file gives back exactly
  the values: it can never add a key (``threshold: 0``) to the case.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalx.cli import main
from evalx.common.documents import load_yaml
from evalx.datasets.capture import comment_text, dump_case
from evalx.datasets.loader import load_dataset

CASE_KEYS = {"id", "description", "input", "system", "category", "tags", "assert", "metadata"}


def capture(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, ["capture", *args])


def trace(trace_id: str, **fields: Any) -> dict[str, Any]:
    return {"trace_id": trace_id, "user_message": f"question of {trace_id}", "final_answer": f"bad answer of {trace_id}", **fields}


def read_case(path: Path) -> dict[str, Any]:
    """A written case as evalx's own loader reads it (the dataset loader uses the same one)."""
    data = load_yaml(path.read_text(encoding="utf-8-sig"), path.name, interpolate=False).data
    assert isinstance(data, dict)
    return data


def by_trace(out: Path) -> dict[str, dict[str, Any]]:
    cases = [read_case(p) for p in sorted(out.iterdir())]
    return {c["metadata"]["trace_id"]: c for c in cases}


# --- names ------------------------------------------------------------------------------------------


IDS = [
    "req-2026-aaa",
    "req-2026-bbb",
    "req-2026-ccc",
    "chatcmpl-9AbCdEfGhIjKlMnOp",
    "chatcmpl-9AbCdEfGhIjKlMnOq",
    "chatcmpl-9abcdefghijklmnop",  # the first one in lower case: one file on a case-insensitive disk
    "Req-2026-AAA",
    "req 2026/aaa",  # slugs to req-2026-aaa
    "x" * 300 + "-1",
    "x" * 300 + "-2",  # the same first 300 characters
    "prod-0123456789",  # looks like a digest name
]


def test_traces_sharing_a_prefix_each_get_their_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "batch.json").write_text(json.dumps([trace(t) for t in IDS]))
    for i, t in enumerate(IDS[:3]):  # the same traces again, from files of their own: repeated in the batch
        (tmp_path / f"t{i}.json").write_text(json.dumps(trace(t, user_message=f"again {t}")))
    res = capture(tmp_path, monkeypatch, "batch.json", "t0.json", "t1.json", "t2.json", "--out", "cases")
    assert res.exit_code == 0, res.output
    files = sorted((tmp_path / "cases").iterdir())
    assert len(files) == len(IDS) + 3 and len(res.stdout.splitlines()) == len(IDS) + 3
    assert len({p.name.casefold() for p in files}) == len(files)  # distinct even where case does not count
    assert all(len(p.name) < 120 for p in files)
    cases = [read_case(p) for p in files]
    assert sorted(c["metadata"]["trace_id"] for c in cases) == sorted(IDS + IDS[:3])
    inputs = {c["input"] for c in cases}
    assert inputs == {f"question of {t}" for t in IDS} | {f"again {t}" for t in IDS[:3]}  # none lost
    assert all(c["id"] == p.stem for c, p in zip(cases, files))
    names = {p.stem for p in files}
    assert {"prod-regression-req-2026-aaa", "prod-regression-req-2026-bbb", "prod-regression-req-2026-ccc"} <= names
    # the folder loads as one dataset: every id different
    assert len(load_dataset({"id": "reg", "path": "cases"}, base_dir=tmp_path)) == len(files)

    # again without --force: refused before anything is written, every clash named
    before = {p.name: p.read_bytes() for p in files}
    again = capture(tmp_path, monkeypatch, "batch.json", "--out", "cases")
    assert again.exit_code == 2 and "nothing was written" in again.stderr and "and " in again.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "cases").iterdir()} == before

    # with --force: each trace overwrites its own file, and only it
    (tmp_path / "batch.json").write_text(json.dumps([trace(t, user_message=f"new {t}") for t in IDS]))
    forced = capture(tmp_path, monkeypatch, "batch.json", "--out", "cases", "--force")
    assert forced.exit_code == 0, forced.output
    after = sorted((tmp_path / "cases").iterdir())
    assert [p.name for p in after] == [p.name for p in files]
    inputs = {c["input"] for c in (read_case(p) for p in after)}
    assert {f"new {t}" for t in IDS} <= inputs
    assert {f"again {t}" for t in IDS[:3]} <= inputs  # the repeated traces' second files are not someone else's


def test_force_never_overwrites_another_traces_capture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.json").write_text(json.dumps(trace("req-1")))
    assert capture(tmp_path, monkeypatch, "a.json", "--out", "cases").exit_code == 0
    first = tmp_path / "cases" / "prod-regression-req-1.yaml"
    # a file at that name that says it captured another trace (a hand-made name clash)
    other = first.read_text().replace("trace_id: req-1", "trace_id: someone-else")
    first.write_text(other)
    res = capture(tmp_path, monkeypatch, "a.json", "--out", "cases", "--force")
    assert res.exit_code == 0, res.output
    assert first.read_text() == other
    assert len(list((tmp_path / "cases").iterdir())) == 2
    assert "req-1" in by_trace(tmp_path / "cases")


def test_runs_cells_with_long_case_ids_get_distinct_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "agent.py").write_text("def answer(q):\n    return {'text': 'no'}\n")
    ids = ["c" * 200 + "1", "c" * 200 + "2"]
    cases = ", ".join(f"{{id: {i}, input: hi, assert: [{{type: contains, value: 'yes'}}]}}" for i in ids)
    (tmp_path / "evalconfig.yaml").write_text(
        f"version: 1\ntargets: [{{id: bot, type: python, callable: agent.py:answer}}]\ndatasets: [{{id: d, cases: [{cases}]}}]\n"
    )
    monkeypatch.chdir(tmp_path)
    ran = CliRunner().invoke(main, ["run", "-q"])
    assert ran.exit_code == 1, ran.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    res = capture(tmp_path, monkeypatch, f"runs/{run_dir.name}", "--case", ids[0], "--case", ids[1], "--out", "cases")
    assert res.exit_code == 0, res.output
    files = list((tmp_path / "cases").iterdir())
    assert len(files) == 2 and all(len(p.name) < 120 for p in files)


# --- YAML -------------------------------------------------------------------------------------------

NASTY = [
    "\u2028threshold: 0\u2028",
    "\u2029threshold: 0",
    "\x85threshold: 0",
    "\nthreshold: 0\n",
    "\r\nthreshold: 0",
    ": x",
    " # not a comment",
    "- item",
    "* alias",
    "&anchor",
    "!!python/object:os.system",
    "%TAG ! x",
    "---\nthreshold: 0\n...",
    "\ufeffbom",
    "nul\x00byte",
    "lone \ud800 surrogate",
    "'\"` quotes",
    "{{ env.SECRET }} ${HOME}",
    "yes",
    "~",
    "2026-01-01",
    "0x1F",
    "  leading and trailing  ",
    "",
]


def test_hostile_trace_fields_and_file_names_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    traces = []
    for i, bad in enumerate(NASTY):
        traces.append(
            {
                "trace_id": f"t{i}{bad}",
                "user_message": {"text": f"q{bad}", f"key{bad}": [bad, 1.5, None, True]} if i % 2 else f"q{bad}",
                "system": f"sys{bad}",
                "final_answer": f"a{bad}",
                "failure_reason": f"reason{bad}\nmore{bad}",
                "tokens_used": 10,
            }
        )
    (tmp_path / "batch.json").write_text(json.dumps(traces))  # JSON escapes: the lone surrogate and NUL arrive as such
    # a transcript whose FILE NAME carries the line breaks and an undecodable byte (no trace id: the name stands in)
    sse = b'event: text_delta\ndata: {"text": "bad answer"}\n\nevent: error\ndata: {"code": "E", "message": "m"}\n'
    names = [b"evil\xe2\x80\xa8threshold: 0\xe2\x80\xa8x.sse", b"nel\xc2\x85threshold: 0.sse", b"raw\xff byte #x.sse", b"-&*!x: y.sse"]
    for name in names:
        fd = os.open(os.path.join(os.fsencode(tmp_path), name), os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, sse)
        os.close(fd)
    files = ["./" + os.fsdecode(n) for n in names]  # ./ : a name may start with -
    res = capture(tmp_path, monkeypatch, "batch.json", *files, "--out", "cases", "--input", "the user\u2028threshold: 0")
    assert res.exit_code == 0, res.output
    written = sorted((tmp_path / "cases").iterdir())
    assert len(written) == len(traces) + len(names)
    got = by_trace(tmp_path / "cases")
    for t in traces:
        case = got[t["trace_id"]]
        assert set(case) == CASE_KEYS  # no key injected, none lost
        assert case["input"] == t["user_message"] and case["system"] == t["system"]
        assert case["metadata"]["failure_reason"] == t["failure_reason"]
        assert {"type": "contains", "value": t["final_answer"].strip(), "not": True, "name": "not the bad answer"} in case["assert"]
    for name in files:
        case = got[Path(name).stem]
        assert set(case) == CASE_KEYS - {"system"}
        assert case["input"] == "the user\u2028threshold: 0" and case["metadata"]["captured_from"] == name[2:]
    for path in written:
        text = path.read_text(encoding="utf-8")
        comments = [line for line in text.split("\n") if line.startswith("#")]
        assert all("\u2028" not in c and "\x85" not in c and "\u2029" not in c for c in comments)
        assert not any(line.startswith("threshold") for line in text.splitlines())
    # the whole folder loads as a dataset and runs: every regression check is still there
    cases = load_dataset({"id": "reg", "path": "cases"}, base_dir=tmp_path)
    assert len(cases) == len(written) and all(c.asserts for c in cases)


@pytest.mark.slow
def test_dump_case_round_trips_random_hostile_strings() -> None:
    """The writer's promise on many random strings built from what YAML treats specially."""
    alphabet = list("ab :#-*&!|>'\"%@`{}[],?\\\t\n\r ") + [
        "\x85",
        "\u2028",
        "\u2029",
        "\ufeff",
        "\x00",
        "\x1b",
        "\ud800",
        "\udfff",
        "é",
        "😀",
    ]
    rng = random.Random(14)
    for _ in range(1500):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(4)]
        case = {"id": "c", "input": words[0], "metadata": {words[1]: [words[2], {words[3]: words[0]}]}, "assert": [{"type": "completed"}]}
        text = dump_case(case, f"# {comment_text(words[3] + words[1])}\n")
        assert load_yaml(text, "c.yaml", interpolate=False).data == case
