"""Work that escapes the cell's limits, and schemas that reach out: $ref outside the schema, backtracking regexes, template bombs."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hostile_server import HostileServer
from interrupting import interrupt_when
from results_file import read_cells

from evalx.assertions.deterministic import json_schema, regex
from evalx.assertions.registry import AssertionContext
from evalx.cli import main
from evalx.common import regexes
from evalx.common.templates import MAX_RENDER_CHARS, TemplateRenderError, render, render_value
from evalx.common.timebox import TimeUp, timebox
from evalx.models import Case, Trajectory

SECRET = "s3cr3t-content-9f2b"


class _Counting(http.server.ThreadingHTTPServer):
    daemon_threads = True
    requests: list[str]


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        body = json.dumps({"type": "string", "a": SECRET}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def schema_server() -> Iterator[_Counting]:
    server = _Counting(("127.0.0.1", 0), _Handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent() -> Iterator[socket.socket]:
    """A listening socket that never answers (a fetch would hang); a connection attempt waits in its backlog, where a test sees it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock
    sock.close()


def _connected(sock: socket.socket) -> bool:
    """Whether anything connected to ``sock`` (it never accepts, so a connection waits in the backlog)."""
    sock.setblocking(False)
    try:
        sock.accept()[0].close()
    except BlockingIOError:
        return False
    return True


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    server = HostileServer().start()
    yield server
    server.stop()


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def _results(config: Path) -> list[dict[str, Any]]:
    run_dir = max((config.parent / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    return read_cells(run_dir)


def _everything_written(tmp_path: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p.name != "secret.json")


# -- $ref that reaches out ------------------------------------------------------------------------


def _ref_project(tmp_path: Path, remote: str, local: str, *, in_config: bool = True) -> Path:
    (tmp_path / "secret.json").write_text(json.dumps({"a": {"const": SECRET}}), encoding="utf-8")
    (tmp_path / "agent.py").write_text('def answer(x):\n    return \'{"a": 1, "b": 2}\'\n', encoding="utf-8")
    (tmp_path / "cases.jsonl").write_text(
        json.dumps({"id": "remote", "input": "x", "assert": [{"type": "json_schema", "schema": {"properties": {"a": {"$ref": remote}}}}]})
        + "\n"
        + json.dumps({"id": "local", "input": "x", "assert": [{"type": "json_schema", "schema": {"properties": {"b": {"$ref": local}}}}]})
        + "\n",
        encoding="utf-8",
    )
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\ntargets: [{id: t, type: python, callable: 'agent.py:answer'}]\n"
        "datasets: [{id: d, path: cases.jsonl}]\n"
        + (
            "assert:\n  - type: json_schema\n    schema:\n      $defs: {n: {type: object}}\n      allOf: [{$ref: '#/$defs/n'}, {$ref: 'other.json'}]\n"
            if in_config
            else ""
        ),
        encoding="utf-8",
    )
    return config


def test_a_schema_ref_outside_the_schema_is_a_validate_error_and_nothing_is_fetched(
    tmp_path: Path, schema_server: _Counting, silent: socket.socket
) -> None:
    secret = (tmp_path / "secret.json").resolve()
    remote = f"http://127.0.0.1:{schema_server.server_port}/x.json"
    for command, in_config in (("validate", True), ("run", True), ("run", False)):
        config = _ref_project(tmp_path, remote, f"file://{secret}#/a", in_config=in_config)
        code, output = _cli(command, "-c", str(config))
        assert code == 2, output
        lines = [line for line in output.splitlines() if line.strip()]
        assert "Traceback" not in output and SECRET not in output
        assert all("points outside the schema" in line for line in lines), output
        config_line = any("evalconfig.yaml:8 assert[0].schema.allOf[1].$ref: $ref 'other.json'" in line for line in lines)
        assert config_line == in_config, output
        if command == "validate" or not in_config:  # `run` stops at the config's own errors first
            assert any(line.startswith(f"cases.jsonl:1 cases[0].assert[0].schema.properties.a.$ref: $ref '{remote}'") for line in lines), (
                output
            )
            assert any(line.startswith("cases.jsonl:2 cases[1].assert[0].schema.properties.b.$ref: $ref 'file://") for line in lines), (
                output
            )
    assert schema_server.requests == []
    # a server that never answers cannot hold a run either: nothing even connects to it
    config = _ref_project(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}/x.json", "#/$defs/none")
    code, output = _cli("run", "-c", str(config))
    assert code == 2, output
    assert not _connected(silent)


def test_at_run_time_a_ref_outside_the_schema_is_refused_never_fetched(tmp_path: Path, schema_server: _Counting) -> None:
    """What validation cannot see (a plugin's spec, a schema built at run time) is refused by the validator itself."""
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"a": {"const": SECRET}}), encoding="utf-8")
    ctx = AssertionContext(case=Case(id="c", input="x"), output=Trajectory(text='{"a": "x"}'))
    for ref in (f"http://127.0.0.1:{schema_server.server_port}/x.json", f"file://{secret}#/a", "other.json"):
        with pytest.raises(ValueError, match="points outside the schema") as caught:
            json_schema(ctx, schema={"properties": {"a": {"$ref": ref}}})
        assert SECRET not in str(caught.value)
    assert schema_server.requests == []
    # references inside the schema, and to the meta-schemas evalx ships, still resolve
    inside = {"$defs": {"s": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/s"}}}
    assert json_schema(ctx, schema=inside).passed is True
    by_id = {
        "$id": "http://example.com/root.json",
        "$defs": {"s": {"$id": "s.json", "type": "integer"}},
        "properties": {"a": {"$ref": "s.json"}},
    }
    assert json_schema(ctx, schema=by_id).passed is False
    meta = {"properties": {"a": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}}
    a_schema = AssertionContext(case=Case(id="c", input="x"), output=Trajectory(text='{"a": {"type": "string"}}'))
    assert json_schema(a_schema, schema=meta).passed is True
    assert json_schema(ctx, schema=meta).passed is False
    assert schema_server.requests == []


# -- regexes that backtrack -----------------------------------------------------------------------

EVIL = "a" * 30 + "!"

REGEX_AGENT = f"""\
import asyncio
from pathlib import Path


async def answer(x):
    if x.startswith("evil"):
        Path("answered-" + x).touch()
        return {json.dumps(EVIL)!r}  # a JSON string, for the json_schema check too
    await asyncio.sleep(0.2)
    return "fine"
"""


def _regex_project(tmp_path: Path, timeout_s: float, evil: int = 2, good: int = 8) -> Path:
    (tmp_path / "agent.py").write_text(REGEX_AGENT, encoding="utf-8")
    cases = []
    for i in range(evil):
        asserts: list[dict[str, Any]] = [
            {"type": "regex", "value": "(a|a)+$"},
            {"type": "regex", "value": "(a|aa)+$", "not": True},
            {"type": "regex", "value": "(a+)+$", "not": True},  # the example: no catastrophe for the regex package
            {"type": "json_schema", "schema": {"type": "string", "pattern": "(a|a)+$"}},
        ]
        cases.append({"id": f"evil{i}", "input": f"evil{i}", "assert": asserts})
    for i in range(good):
        cases.append(
            {
                "id": f"good{i}",
                "input": f"good{i}",
                "assert": [{"type": "regex", "value": "^fi+ne$"}, {"type": "max_latency_ms", "value": 8000}],
            }
        )
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        f"version: 1\ndefaults: {{timeout_s: {timeout_s}, concurrency: 4}}\n"
        "targets: [{id: t, type: python, callable: 'agent.py:answer'}]\n"
        "datasets: [{id: d, path: cases.jsonl}]\n",
        encoding="utf-8",
    )
    return config


def test_a_backtracking_regex_counts_against_the_cell_and_never_holds_up_the_others(tmp_path: Path) -> None:
    """Whichever layer notices the time is up (the regex's budget, or the watchdog when a check holds the loop), the check's
    error reads as every timeout does; the other cells finish, and no timeout becomes a pass. Outcomes only: a busy machine
    stretches every time here, so the bounds are loose (before the fix a regex held the loop 10 s, doubling per extra "a")."""
    config = _regex_project(tmp_path, timeout_s=1)
    proc = subprocess.run(
        [sys.executable, "-m", "evalx", "run", "-c", str(config)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    by_id = {r["case_id"]: r for r in _results(config)}
    for i in range(2):
        cell = by_id[f"evil{i}"]
        assert cell["status"] == "error", cell
        timed_out, negated, plain, schema = cell["assertions"]
        assert timed_out["passed"] is None and "timed out after 1s" in timed_out["error"], timed_out
        assert negated["passed"] is None and negated.get("error"), negated  # `not:` never turns a timeout into a pass
        assert plain["passed"] is True, plain
        assert schema["passed"] is None and "timed out after 1s" in schema["error"], schema
    for i in range(8):
        cell = by_id[f"good{i}"]
        assert cell["status"] == "pass", cell
        assert cell["latency_ms"] < 8000, cell["latency_ms"]  # 200 ms of the target's own; the regexes ran off the loop


@pytest.mark.slow
def test_sigterm_stops_a_run_while_a_regex_backtracks(tmp_path: Path) -> None:
    config = _regex_project(tmp_path, timeout_s=600, evil=1, good=0)
    # the target tells when it answered (scoring starts); half a second on, the regex backtracks with 600 s of budget
    run = interrupt_when(tmp_path / "answered-evil0", config, settle_s=0.5)  # fails unless the run stops (the regex had 600 s)
    assert run.returncode == 3, run.out + run.err
    assert "Traceback" not in run.err
    run_dir = next((tmp_path / "runs").iterdir())
    assert (run_dir / "summary.json").exists() and (run_dir / "junit.xml").exists()


def test_the_bounded_matcher_keeps_re_semantics_and_its_limits() -> None:
    ctx = AssertionContext(case=Case(id="c", input="x"), output=Trajectory(text="Refund: 42 EUR\nok"))
    assert regex(ctx, value=r"(?<!\w)42\b").passed is True  # lookbehind: what re2 would refuse
    assert regex(ctx, value=r"(\d)\1").passed is False  # backreference
    assert regex(ctx, value=r"^ok$", flags="m").passed is True
    assert regex(ctx, value=r"refund", flags="i").passed is True
    slow = regexes.compile_user("(a|a)+$")
    t0 = time.thread_time()
    with regexes.budget(0.3, on_loop=False), pytest.raises(regexes.RegexTimeout, match=r"timed out after 0\.3s \(the regex /\(a\|a\)\+\$/"):
        regexes.search(slow, EVIL)
    assert time.thread_time() - t0 < 3  # this thread's CPU time, which load does not stretch (unbounded, this "a"*30 takes minutes)
    with regexes.budget(5, on_loop=True), pytest.raises(regexes.NeedsThread):
        regexes.search(slow, EVIL)  # the event loop gets a short slice, then the check moves to a thread


@pytest.mark.slow
def test_a_schema_with_many_unique_objects_is_checked_in_linear_time() -> None:
    items = [{"k": i, "v": [i, str(i)]} for i in range(50_000)]
    ctx = AssertionContext(case=Case(id="c", input="x"), output=Trajectory(text=json.dumps(items + [{"v": [0, "0"], "k": 0.0}])))
    t0 = time.thread_time()
    verdict = json_schema(ctx, schema={"type": "array", "uniqueItems": True})
    assert verdict.passed is False and "non-unique" in verdict.reason
    # CPU seconds (load does not stretch them): ~0.5 s here; comparing 50,001 items pairwise takes minutes
    assert time.thread_time() - t0 < 10
    ctx = AssertionContext(case=Case(id="c", input="x"), output=Trajectory(text=json.dumps([1, True, "1", [1], {"a": 1}, {"a": True}])))
    assert json_schema(ctx, schema={"uniqueItems": True}).passed is True  # true is not 1, as JSON Schema says


# -- templates ------------------------------------------------------------------------------------

LOOPS = "{% for i in range(20000) %}{% for j in range(20000) %}{% endfor %}{% endfor %}"
BOMBS = {
    "loops": LOOPS,
    "repeat": "{{ 'a' * 10**8 }}",
    "center": "{{ 'a'|center(10**9) }}",
    "format": "{{ '{:>{w}}'.format('a', w=10**9) }}",
    "percent": "{{ '%1000000000s' % 'a' }}",
    "doubling": "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "macro": "{% macro m(s) %}{{ s }}{{ s }}{% endmacro %}{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = m(ns.s) %}{% endfor %}",
    "output": "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
    "power": "{{ 7 ** 100000000 }}",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BOMBS))
def test_a_template_bomb_is_refused_quickly(name: str) -> None:
    t0 = time.thread_time()
    with pytest.raises(TemplateRenderError, match=r"^prompt: template refused: ") as caught:
        render(BOMBS[name], {}, field="prompt")
    assert time.thread_time() - t0 < 5, caught.value  # CPU seconds, which load does not stretch: at most the 1 s render limit
    with pytest.raises(TemplateRenderError, match=r"^params\.a\[0\]: template refused: "):
        render_value({"a": [BOMBS[name]]}, {}, field="params")


def test_ordinary_templates_render_as_before() -> None:
    ctx = {"case": {"input": "hi", "n": 3}, "vars": {"xs": [1, 2]}}
    assert (
        render("{{ case.input * case.n }}|{{ vars.xs + [3] }}|{{ '%-4s|' % 'a' }}{{ '{:>3}'.format(1) }}", ctx)
        == "hihihi|[1, 2, 3]|a   |  1"
    )
    assert render("{{ 'ab' ~ case.input }}{{ 'x'|center(5) }}{{ 2 ** 10 }}", ctx) == "abhi  x  1024"
    assert render_value("{{ case }}", ctx) == ctx["case"]
    big = "y" * (MAX_RENDER_CHARS - 10)
    assert render("{{ big }}", {"big": big}) == big  # data as large as the limit still renders


def test_a_timebox_never_leaks_its_exception_past_the_box() -> None:
    for _ in range(200):  # boxes that end just as the guard looks
        try:
            with timebox(0.0001):
                sum(range(2000))
        except TimeUp:
            pass
    t0 = time.thread_time()
    with pytest.raises(TimeUp), timebox(0.2):
        while True:
            pass
    assert time.thread_time() - t0 < 5  # CPU seconds spun: at most the 0.2 s box, however loaded the machine
    total = sum(range(100_000))  # nothing pending afterwards
    assert total == 4999950000


def _template_project(tmp_path: Path, hostile: HostileServer) -> Path:
    prompt = (
        "{% if case.id == 'loops' %}" + LOOPS + "{% elif case.id == 'big' %}{{ 'a' * 10**8 }}{% endif %}Capital of France? {{ case.input }}"
    )
    target = {
        "id": "p",
        "type": "provider",
        "provider": "openai",
        "model": "m",
        "base_url": f"{hostile.url}/ok/v1",
        "api_key": "k",
        "cache": False,
        "prompt": prompt,
    }
    cases = [
        {"id": "loops", "input": "x", "vars": {"bomb": "loops"}},
        {"id": "big", "input": "x", "vars": {"bomb": "big"}},
        *({"id": f"fine{i}", "input": "x", "assert": [{"type": "max_latency_ms", "value": 1500}]} for i in range(6)),
    ]
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\ndefaults: {timeout_s: 1, retries: 0, concurrency: 4}\n"
        f"targets: [{json.dumps(target)}]\n"
        "datasets: [{id: d, path: cases.jsonl}]\n"
        "assert: [{type: completed}]\n",
        encoding="utf-8",
    )
    return config


@pytest.mark.slow
def test_a_prompt_template_bomb_is_that_cells_error_naming_the_field(tmp_path: Path, hostile: HostileServer) -> None:
    config = _template_project(tmp_path, hostile)
    proc = subprocess.run(  # timeout=: the hang guard (the bomb alone would run for minutes)
        [sys.executable, "-m", "evalx", "run", "-c", str(config)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    by_id = {r["case_id"]: r for r in _results(config)}
    # the render's own bound (1 s) and the cell's (timeout_s 1) meet: the cell's deadline, which comes first, words it
    assert by_id["loops"]["status"] == "error" and "prompt: timed out after 1s (rendering the template" in by_id["loops"]["error"]
    assert by_id["big"]["status"] == "error" and "prompt: template refused: repeating a str" in by_id["big"]["error"]
    for i in range(6):
        assert by_id[f"fine{i}"]["status"] == "pass", by_id[f"fine{i}"]
    assert "aaaaaaaaaa" not in _everything_written(tmp_path)


@pytest.mark.slow
def test_a_provider_definitions_error_regex_cannot_be_made_to_backtrack_by_the_server(tmp_path: Path, hostile: HostileServer) -> None:
    """``errors: {fatal: {body: [...]}}`` patterns run on whatever a server answers: bounded like every user regex."""
    openai = (Path(__file__).resolve().parents[2] / "providers" / "openai.yaml").read_text(encoding="utf-8")
    assert openai.count('body: ["insufficient_quota"]') == 1
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "careless.yaml").write_text(
        openai.replace("name: openai", "name: careless").replace('body: ["insufficient_quota"]', 'body: ["(a|a)+$"]'), encoding="utf-8"
    )
    target = {"id": "c", "type": "provider", "provider": "careless", "model": "m", "base_url": f"{hostile.url}/backtrack/v1"}
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\nproviders_dir: defs\ndefaults: {timeout_s: 10, retries: 0}\n"
        f"targets: [{json.dumps({**target, 'api_key': 'k', 'cache': False})}]\n"
        "datasets: [{id: d, cases: [{id: a, input: hi}, {id: b, input: ho}]}]\n",
        encoding="utf-8",
    )
    proc = subprocess.run(  # timeout=: the hang guard (the regex alone would backtrack for minutes)
        [sys.executable, "-m", "evalx", "run", "-c", str(config)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr  # every cell errored, and the run ended
    for cell in _results(config):
        # a match outside a check may take 1 s; on a machine so loaded that the cell's 10 s come first, the deadline says so
        said = ("the regex /(a|a)+$/ ran past 1s", "timed out after 10s")
        assert cell["status"] == "error" and any(s in cell["error"] for s in said), cell["error"]


# -- a check that never returns --------------------------------------------------------------------

SPINNING_CHECK = """\
from pathlib import Path


def spin(output, ctx):
    if ctx.case.id == "spin":
        Path("spinning").touch()
        while True:  # a check that never returns nor awaits
            pass
    return True
"""


def _spin_check_project(tmp_path: Path, timeout_s: float) -> Path:
    (tmp_path / "agent.py").write_text("def answer(x):\n    return 'ok'\n", encoding="utf-8")
    (tmp_path / "checks.py").write_text(SPINNING_CHECK, encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        f"version: 1\ndefaults: {{timeout_s: {timeout_s}, concurrency: 1}}\n"
        "targets: [{id: t, type: python, callable: 'agent.py:answer'}]\n"
        "datasets: [{id: d, cases: [{id: a, input: hi}, {id: spin, input: x}, {id: b, input: ho}]}]\n"
        "assert: [{type: python, callable: 'checks.py:spin'}]\n",
        encoding="utf-8",
    )
    return config


@pytest.mark.slow
def test_a_check_that_never_returns_ends_with_its_cell_and_the_run_goes_on(tmp_path: Path) -> None:
    config = _spin_check_project(tmp_path, timeout_s=1)
    proc = subprocess.run(  # timeout=: the hang guard (the check spins forever)
        [sys.executable, "-m", "evalx", "run", "-c", str(config)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    by_id = {r["case_id"]: r for r in _results(config)}
    assert by_id["spin"]["status"] == "error", by_id["spin"]
    (check,) = by_id["spin"]["assertions"]
    assert check["passed"] is None and check["error"] == "timed out after 1s (the check python held the event loop)", check
    assert by_id["a"]["status"] == "pass" and by_id["b"]["status"] == "pass"


@pytest.mark.slow
def test_sigterm_stops_a_run_whose_check_never_returns(tmp_path: Path) -> None:
    config = _spin_check_project(tmp_path, timeout_s=600)
    run = interrupt_when(tmp_path / "spinning", config)  # fails unless the run stops (the check had 600 s)
    assert run.returncode == 3, run.out + run.err
    assert "Traceback" not in run.err
    run_dir = next((tmp_path / "runs").iterdir())
    assert (run_dir / "summary.json").exists() and (run_dir / "junit.xml").exists()


def test_a_ref_to_nothing_in_the_schema_is_a_validate_error(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text("def answer(x):\n    return '{}'\n", encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\ntargets: [{id: t, type: python, callable: 'agent.py:answer'}]\n"
        "datasets:\n  - id: d\n    cases:\n      - id: a\n        input: x\n        assert:\n"
        "          - type: json_schema\n            schema: {$defs: {s: {type: object}}, anyOf: [{$ref: '#/$defs/s'}, {$ref: '#/$defs/t'}]}\n",
        encoding="utf-8",
    )
    code, output = _cli("validate", "-c", str(config))
    assert code == 2, output
    (line,) = [line for line in output.splitlines() if line.strip()]
    assert line.endswith(
        "evalconfig.yaml:10 datasets[0].cases[0].assert[0].schema.anyOf[1].$ref: $ref '#/$defs/t' points to nothing in the schema"
    ), line
