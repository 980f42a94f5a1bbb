"""The public Python API: ``evalx.load_config``, ``evalx.run`` / ``evalx.arun`` and their results, as a notebook uses them."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from _fake_llm import OPENAI_KEY, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)

import evalx


def shout(question: str) -> str:
    """A target given to the config as a Python function, not as ``module:function``."""
    return question.upper()


def notebook_config() -> dict[str, Any]:
    return {
        "version": 1,
        "name": "notebook",
        "targets": [
            {"id": "shout", "type": "python", "callable": shout},
            {"id": "echo", "type": "python", "callable": lambda q: q},
        ],
        "datasets": [
            {
                "id": "d",
                "cases": [
                    {"id": "hello", "input": "hello", "tags": ["quick"], "assert": [{"type": "contains", "value": "HELLO"}]},
                    {"id": "bye", "input": "bye", "category": "farewell", "assert": [{"type": "contains", "value": "BYE"}]},
                ],
            }
        ],
    }


def test_a_dict_config_with_python_callables_runs_and_reads_back_as_objects(tmp_path: Path) -> None:
    config = evalx.load_config(notebook_config(), base_dir=tmp_path)
    result = evalx.run(config)
    assert isinstance(result, evalx.RunResult)
    assert result.run_dir.parent == tmp_path / "runs" and result.run_dir.name == result.run_id
    assert result.exit_code == 1 and not result.passed  # echo fails: its answers are not upper case
    assert result.summary["totals"]["cells"] == 4 and result.summary["totals"]["pass"] == 2
    cells = list(result.results())
    assert all(isinstance(c, evalx.CellResult) for c in cells)
    by = {(c.target, c.case_id): c for c in cells}
    assert by["shout", "hello"].passed and by["shout", "hello"].text == "HELLO"
    assert by["shout", "hello"].tags == ("quick",) and by["shout", "bye"].category == "farewell"
    failed = by["echo", "bye"]
    assert failed.status == "fail" and failed.text == "bye"
    assert failed.reason.startswith("contains") and "BYE" in failed.reason
    assert failed.assertions[0] == evalx.AssertionResult("contains", False, 0.0, failed.assertions[0].reason, None)
    assert failed.record["case_id"] == "bye"  # the whole stored line
    # the stored config names the functions module:qualname
    stored = yaml.safe_load((result.run_dir / "config.yaml").read_text())
    assert [t["callable"] for t in stored["targets"]] == [f"{__name__}:shout", f"{__name__}:notebook_config._locals_._lambda_"]


def test_a_run_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    """A run freezes the heap and spaces out collections while it works (issue 29); a notebook's process gets its
    collector back as it was, whether the run ends well or with an error."""
    import gc

    before = (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count())
    assert evalx.run(notebook_config(), output_dir=tmp_path / "out").exit_code == 1
    assert (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()) == before
    with pytest.raises(evalx.ConfigError):
        evalx.run(notebook_config(), output_dir=tmp_path / "out", cases=["no-such-case"])
    assert (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()) == before


def test_run_takes_the_command_line_options(tmp_path: Path) -> None:
    result = evalx.run(
        notebook_config(), targets=["shout"], tags="quick", repeat=2, output_dir=tmp_path / "out", concurrency=1, no_cache=True
    )
    assert result.exit_code == 0
    assert result.run_dir.parent == (tmp_path / "out").resolve()
    assert [(c.target, c.case_id, c.repeat) for c in result.results()] == [("shout", "hello", 0), ("shout", "hello", 1)]
    meta = json.loads((result.run_dir / "run.json").read_text())
    assert meta["selection"]["tags"] == ["quick"] and meta["selection"]["repeat"] == 2


def test_to_pandas(tmp_path: Path) -> None:
    pandas = pytest.importorskip("pandas")
    frame = evalx.run(notebook_config(), output_dir=tmp_path).to_pandas()
    assert isinstance(frame, pandas.DataFrame)
    assert len(frame) == 4 and list(frame.columns[:6]) == ["run_id", "target", "dataset", "case_id", "repeat", "status"]
    assert frame.groupby("target")["status"].apply(lambda s: (s == "pass").mean()).to_dict() == {"echo": 0.0, "shout": 1.0}


def test_to_pandas_without_pandas_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = evalx.run(notebook_config(), output_dir=tmp_path, targets=["shout"])
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"^to_pandas\(\) needs pandas: pip install pandas \(or evalx-runner\[pandas\]\)$"):
        result.to_pandas()


def test_a_bad_dict_config_raises_config_error_with_where(tmp_path: Path) -> None:
    config = notebook_config()
    del config["targets"][0]["callable"]
    config["targets"][1]["type"] = "pyhton"
    with pytest.raises(evalx.ConfigError) as info:
        evalx.load_config(config, base_dir=tmp_path)
    err = info.value
    assert err.file == "<config>" and err.line is None and err.key_path == "targets[0].callable"
    assert "'callable' is a required property" in err.errors[0].message
    assert [e.key_path for e in err.errors] == ["targets[0].callable", "targets[1].type"]
    assert str(err).splitlines()[0].startswith("<config> targets[0].callable: ")


def test_a_bad_file_config_raises_with_file_line_and_key_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "evalconfig.yaml").write_text("version: 1\ntargets:\n  - id: t\n    type: python\ndatasets: []\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(evalx.ConfigError) as info:
        evalx.load_config("evalconfig.yaml")
    assert (info.value.file, info.value.line, info.value.key_path) == ("evalconfig.yaml", 3, "targets[0].callable")
    assert [(e.line, e.key_path) for e in info.value.errors] == [(3, "targets[0].callable"), (5, "datasets")]


def test_a_value_yaml_cannot_hold_is_named(tmp_path: Path) -> None:
    config = notebook_config()
    config["vars"] = {"when": object()}
    with pytest.raises(evalx.ConfigError) as info:
        evalx.load_config(config, base_dir=tmp_path)
    assert info.value.key_path == "vars.when" and "cannot be written in a config" in str(info.value)


def test_a_selection_that_matches_nothing_raises(tmp_path: Path) -> None:
    with pytest.raises(evalx.ConfigError, match="--tag nightly selects no cell"):
        evalx.run(notebook_config(), output_dir=tmp_path, tags=["nightly"])


def test_run_inside_a_running_event_loop(tmp_path: Path) -> None:
    """As in Jupyter: the notebook's loop is running when the cell calls evalx.run."""
    seen: list[str] = []

    async def notebook_cell() -> evalx.RunResult:
        seen.append(threading.current_thread().name)
        return evalx.run(notebook_config(), output_dir=tmp_path, targets=["shout"])

    result = asyncio.run(notebook_cell())
    assert result.exit_code == 0 and len(list(result.results())) == 2


def test_arun_is_the_async_twin(tmp_path: Path) -> None:
    async def main() -> tuple[evalx.RunResult, int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        ticker = asyncio.create_task(tick())
        slow = notebook_config()
        slow["targets"] = [{"id": "slow", "type": "python", "callable": _slow}]
        try:
            return await evalx.arun(slow, output_dir=tmp_path), ticks
        finally:
            ticker.cancel()

    result, ticks = asyncio.run(main())
    assert result.exit_code == 0
    assert ticks >= 5  # the caller's loop kept running while the run went on


def _slow(question: str) -> str:
    import time

    time.sleep(0.1)
    return question.upper()


def test_two_configs_in_one_process_keep_their_own_include_folders(tmp_path: Path, server: FakeLLMServer) -> None:
    """A prompt's {% include %} reads from its own config's folder, not from the folder of the config loaded last."""

    def config(name: str) -> Any:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "greeting.txt").write_text(f"greeting from {name}")
        target = {"id": "m", "type": "provider", "provider": "openai", "model": "gpt-4o-mini", "base_url": f"{server.url}/v1"}
        target |= {"api_key": OPENAI_KEY, "prompt": "{% include 'greeting.txt' %}"}
        case = {"id": "c", "input": "x", "assert": [{"type": "contains", "value": f"greeting from {name}"}]}
        return evalx.load_config({"version": 1, "targets": [target], "datasets": [{"id": "d", "cases": [case]}]}, base_dir=folder)

    a, b = config("a"), config("b")  # b is loaded last
    first = evalx.run(a, no_cache=True)
    assert first.exit_code == 0, [c.reason for c in first.results()]
    assert evalx.run(b, no_cache=True).exit_code == 0


def test_a_config_file_with_vars(tmp_path: Path, server: FakeLLMServer) -> None:
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\n"
        "vars: {who: nobody}\n"
        f"targets: [{{id: m, type: provider, provider: openai, model: gpt-4o-mini, base_url: '{server.url}/v1', "
        f"api_key: {OPENAI_KEY}, prompt: 'hello {{{{ vars.who }}}}'}}]\n"
        "datasets: [{id: d, cases: [{id: c, input: x, assert: [{type: contains, value: 'hello world'}]}]}]\n"
    )
    assert evalx.run(tmp_path / "evalconfig.yaml", no_cache=True).exit_code == 1  # "You said: hello nobody"
    result = evalx.run(str(tmp_path / "evalconfig.yaml"), vars={"who": "world"}, no_cache=True)
    assert result.exit_code == 0 and next(result.results()).text == "You said: hello world"
    assert result.run_dir.parent == tmp_path / "runs"


# -- the API can do what `evalx run` does: shards, resume, rerun, outputs (one RunRequest for both) -------------------


def test_the_api_shards_and_the_cli_merges_what_it_ran(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from evalx.cli import main

    (tmp_path / "bots.py").write_text("def shout(q):\n    return q.upper()\n\n\ndef echo(q):\n    return q\n", encoding="utf-8")
    data = notebook_config()
    data["targets"] = [
        {"id": "shout", "type": "python", "callable": "bots.py:shout"},
        {"id": "echo", "type": "python", "callable": "bots.py:echo"},
    ]
    (tmp_path / "evalconfig.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    shards = [evalx.run(tmp_path / "evalconfig.yaml", shard=f"{i}/2") for i in (1, 2)]
    assert [s.summary["totals"]["cells"] for s in shards] == [2, 2]  # whole cases dealt: one case (two targets) each
    assert {c.case_id for c in shards[0].results()} != {c.case_id for c in shards[1].results()}
    merged = CliRunner().invoke(main, ["merge", "-c", str(tmp_path / "evalconfig.yaml"), *(str(s.run_dir) for s in shards), "--json"])
    assert merged.exit_code == 1, merged.output  # echo fails, as in one run
    assert json.loads(merged.stdout)["totals"]["cells"] == 4


def test_the_api_reruns_the_failed_cells_and_resumes_a_run(tmp_path: Path) -> None:
    config = evalx.load_config(notebook_config(), base_dir=tmp_path)
    first = evalx.run(config)
    rerun = evalx.run(config, rerun="failed", rerun_from="latest")
    assert rerun.run_id != first.run_id and rerun.summary["totals"]["cells"] == 4
    meta = json.loads((rerun.run_dir / "run.json").read_text())
    assert meta["parent"] == first.run_id and meta["rerun"] == ["failed"]
    # a run cut short: its results file lost its last two cells; resume runs just those
    lines = (first.run_dir / "results.jsonl").read_text().splitlines(keepends=True)
    (first.run_dir / "results.jsonl").write_text("".join(lines[:-2]))
    resumed = evalx.run(config, resume=first.run_id)
    assert resumed.run_id == first.run_id and resumed.summary["totals"]["cells"] == 4
    with pytest.raises(evalx.EvalxError, match="--rerun and --from go together"):
        evalx.run(config, rerun="failed")


def test_the_api_writes_the_outputs_the_cli_would(tmp_path: Path) -> None:
    result = evalx.run(
        notebook_config(),
        output_dir=tmp_path,
        junit=tmp_path / "out" / "junit.xml",
        junit_flavor="extended",
        html=tmp_path / "out" / "report.html",
        markdown=tmp_path / "out" / "summary.md",
    )
    junit = (tmp_path / "out" / "junit.xml").read_text()
    assert "file=" in junit and "file=" not in (result.run_dir / "junit.xml").read_text()  # the run's own stays standard
    assert (tmp_path / "out" / "report.html").read_bytes() == (result.run_dir / "report.html").read_bytes()
    assert "notebook" in (tmp_path / "out" / "summary.md").read_text()
    with pytest.raises(evalx.EvalxError, match="--junit-flavor extended applies to the file --junit writes"):
        evalx.run(notebook_config(), output_dir=tmp_path, junit_flavor="extended")


# -- warnings: logging records, printed as the CLI prints them unless the program configured logging ------------------

_WARNS = """
import logging, sys
{setup}
import evalx
config = {{
    "version": 1, "name": "gated",
    "targets": [{{"id": "bot", "type": "python", "callable": "bot.py:answer"}}],
    "datasets": [{{"id": "d", "cases": [{{"id": "a", "input": "x", "assert": [{{"type": "equals", "value": "x"}}]}}]}}],
    "gates": {{"baseline": "latest", "max_pass_rate_drop": 0.0}},
}}
evalx.run(config, output_dir="runs")
"""


@pytest.mark.parametrize(
    ("setup", "expected", "absent"),
    [
        ("", "evalx: warning: no completed run of 'gated'", "WARNING:"),
        ("logging.basicConfig(format='LOG %(levelname)s %(name)s: %(message)s')", "LOG WARNING evalx.", "evalx: warning:"),
    ],
)
def test_run_warnings_print_on_stderr_unless_the_program_configured_logging(tmp_path: Path, setup: str, expected: str, absent: str) -> None:
    import subprocess

    (tmp_path / "bot.py").write_text("def answer(q):\n    return q\n")
    proc = subprocess.run(
        [sys.executable, "-c", _WARNS.format(setup=setup)], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stderr and "no completed run of 'gated'" in proc.stderr, proc.stderr
    assert absent not in proc.stderr and proc.stdout == ""


def test_the_line_formatter_reads_as_evalx_lines() -> None:
    import io
    import logging

    from evalx.logs import printing

    stream = io.StringIO()
    log = logging.getLogger("evalx.some.module")
    with printing(stream):
        log.warning("a gate was skipped")
        log.info("resuming r1: 2 of 3 cells have results, running 1")
        with printing(io.StringIO()):  # nested (a second run on another thread): the first handler serves both
            log.warning("once")
    log.warning("after the block: not printed here")
    assert stream.getvalue().splitlines() == [
        "evalx: warning: a gate was skipped",
        "evalx: resuming r1: 2 of 3 cells have results, running 1",
        "evalx: warning: once",
    ]
    assert not logging.getLogger("evalx").handlers


def test_a_notebook_shows_a_run_result_as_its_headline_a_row_per_target_and_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a notebook's folder: the link is relative to it
    config = notebook_config()
    config["targets"].append({"id": "loud", "type": "python", "callable": shout})
    config["name"] = "<i>notebook</i>"
    result = evalx.run(evalx.load_config(config, base_dir=tmp_path))
    html = result._repr_html_()
    assert f"<b>evalx run <code>{result.run_id}</code></b> &lt;i&gt;notebook&lt;/i&gt; · 6 cells · exit 1: 2 failed cells</p>" in html
    rows = html.split("<tr>")[2:]
    assert [row.split("<code>")[1].split("</code>")[0] for row in rows] == ["shout", "echo", "loud"]
    assert ">100.0%<" in rows[0] and ">0.0%<" in rows[1]
    href = f"runs/{result.run_id}/report.html"
    assert f'<a href="{href}" target="_blank">' in html and (tmp_path / href).is_file()
    assert str(tmp_path) not in html and "{" not in html  # no absolute path, and not a dict dump
