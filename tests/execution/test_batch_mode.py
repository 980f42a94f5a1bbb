"""Batch mode end to end through the CLI, against fake OpenAI and Anthropic batch APIs (tests/batch_server.py).

Each cell is graded once from its batch's answer, priced at the batch price (half the target's ``pricing:``);
a request that expired is sent again as a normal call (full price), one the API rejected is the cell's error;
batches are split to ``max_requests``; a definition without a ``batch:`` section refuses ``batch: true``;
a run killed while it polls resumes polling with ``--resume`` and sends nothing twice; the judge's calls are
batched too, after the answers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.batch_server import INPUT_TOKENS, OUTPUT_TOKENS, BatchServer

MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-haiku-4-5"}
#: the target's price (USD per million tokens): a normal call costs $0.002, a batched one $0.001
PRICE_IN, PRICE_OUT = 1.0, 10.0
NORMAL = (INPUT_TOKENS * PRICE_IN + OUTPUT_TOKENS * PRICE_OUT) / 1e6


@pytest.fixture(params=["openai", "anthropic"])
def server(request: pytest.FixtureRequest) -> Iterator[BatchServer]:
    srv = BatchServer(request.param).start()
    try:
        yield srv
    finally:
        srv.stop()


def evalx(project: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalx", *args], cwd=project, capture_output=True, text=True, timeout=timeout)


def write_project(
    root: Path, srv: BatchServer, inputs: list[str], *, batch: str = "{poll_interval_s: 0.05}", extra: str = "", dataset_file: bool = False
) -> Path:
    base = srv.url + ("/v1" if srv.kind == "openai" else "")
    target = f"""\
      - id: m
        type: provider
        provider: {srv.kind}
        model: {MODELS[srv.kind]}
        base_url: {base}
        api_key: sk-test
        pricing: {{input_per_mtok: {PRICE_IN}, output_per_mtok: {PRICE_OUT}}}
        batch: {batch}
    """
    if dataset_file:
        with (root / "cases.jsonl").open("w") as f:
            for i, text in enumerate(inputs):
                f.write(json.dumps({"id": f"c{i}", "input": text, "assert": [{"type": "contains", "value": text}]}) + "\n")
        datasets = "  - {id: d, path: cases.jsonl}\n"
    else:
        datasets = "  - id: d\n    cases:\n" + "".join(
            f"      - {{id: c{i}, input: {json.dumps(text)}, assert: [{{type: contains, value: {json.dumps(text)}}}]}}\n"
            for i, text in enumerate(inputs)
        )
    (root / "evalconfig.yaml").write_text(
        "version: 1\nname: batch\ntargets:\n" + textwrap.indent(textwrap.dedent(target), "  ") + "datasets:\n" + datasets + extra
    )
    return root


def cells(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "status" in record and record.get("kind") != "case":
            out.append(record)
    return out


def only_run(root: Path) -> Path:
    runs = [p for p in (root / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def test_cells_are_answered_from_one_batch_at_half_price(tmp_path: Path, server: BatchServer) -> None:
    inputs = [f"question {i}" for i in range(12)]
    root = write_project(tmp_path, server, inputs)
    done = evalx(root, "run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert server.creations == 1 and server.batched_requests == 12 and server.normal_calls == 0
    assert server.problems == []
    run = only_run(root)
    results = cells(run)
    assert sorted(r["case_id"] for r in results) == sorted(f"c{i}" for i in range(12))  # each cell graded once
    assert all(r["status"] == "pass" for r in results)
    assert all(r["cost_usd"] == pytest.approx(NORMAL / 2) for r in results)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["cost_usd"] == pytest.approx(12 * NORMAL / 2)
    assert summary["batched_cells"] == summary["per_target"]["m"]["batched_cells"] == 12
    assert "12 cells at the batch price" in (run / "summary.txt").read_text()
    assert "12 cells at the batch price" in (run / "report.html").read_text()
    ledger = json.loads((run / "batches.json").read_text())
    assert [b["queue"] for b in ledger["batches"]] == ["target:m"] and ledger["batches"][0]["requests"] == 12
    assert "batch: 1 submitted (12 requests)" in done.stderr  # the progress line


def test_expired_requests_fall_back_to_a_normal_call_and_rejected_ones_are_errors(tmp_path: Path, server: BatchServer) -> None:
    inputs = ["fine one", "late EXPIRE", "broken BADREQ", "fine two"]
    root = write_project(tmp_path, server, inputs)
    done = evalx(root, "run")
    assert done.returncode == 1, done.stdout + done.stderr
    by_case = {r["case_id"]: r for r in cells(only_run(root))}
    assert server.creations == 1
    assert server.normal_calls == 1  # the expired request only
    assert by_case["c0"]["status"] == by_case["c3"]["status"] == "pass"
    assert by_case["c0"]["cost_usd"] == pytest.approx(NORMAL / 2)
    assert by_case["c1"]["status"] == "pass" and by_case["c1"]["cost_usd"] == pytest.approx(NORMAL)  # a normal call: full price
    assert by_case["c1"]["output"]["raw"]["batch_fallback"].startswith("expired")
    assert by_case["c2"]["status"] == "error" and "batch request errored" in by_case["c2"]["error"]
    assert "bad request in batch" in by_case["c2"]["error"]


def test_a_batched_answer_past_max_response_bytes_is_the_cells_error(tmp_path: Path, server: BatchServer) -> None:
    """A batch's result line is bounded by the target's max_response_bytes as a normal answer is (issue 30, class 9)."""
    root = write_project(tmp_path, server, ["fine one", "a HUGE one"], batch="{poll_interval_s: 0.05}")
    config = root / "evalconfig.yaml"
    config.write_text(config.read_text().replace("    api_key: sk-test\n", "    api_key: sk-test\n    max_response_bytes: 100000\n"))
    assert "max_response_bytes: 100000" in config.read_text()
    done = evalx(root, "run")
    assert done.returncode == 1, done.stdout + done.stderr
    by_case = {r["case_id"]: r for r in cells(only_run(root))}
    assert by_case["c0"]["status"] == "pass"
    huge = by_case["c1"]
    assert huge["status"] == "error" and "max_response_bytes (100,000 bytes)" in huge["error"], huge["error"]
    assert huge["error"].startswith("the batch answer from ")  # its line was never held whole, nor read as an answer
    assert server.normal_calls == 0  # not sent again: the next answer would be as big
    assert max(len(line) for line in (only_run(root) / "results.jsonl").read_bytes().splitlines()) < 200_000


def test_a_batch_that_outlasts_max_wait_s_falls_back_to_normal_calls(tmp_path: Path) -> None:
    srv = BatchServer("anthropic").start()
    srv.hold.set()  # the batch never ends
    try:
        root = write_project(tmp_path, srv, ["a", "b", "c"], batch="{poll_interval_s: 0.05, max_wait_s: 0.5}")
        done = evalx(root, "run", "--no-cache")
        assert done.returncode == 0, done.stdout + done.stderr
        assert srv.creations == 1 and srv.normal_calls == 3
        results = cells(only_run(root))
        assert all(r["cost_usd"] == pytest.approx(NORMAL) for r in results)  # normal calls: the normal price
        assert all(r["output"]["raw"]["batch_fallback"].startswith("timeout") for r in results)
    finally:
        srv.stop()


def test_a_batch_goes_out_while_other_targets_still_run(tmp_path: Path) -> None:
    """The batch-mode target's requests do not wait for a slow target's cells: that one finishes only once the batch exists."""
    srv = BatchServer("openai").start()
    try:
        (tmp_path / "slow.py").write_text(
            "import pathlib, time\n"
            "def answer(q):\n"
            "    end = time.monotonic() + 120\n"
            "    while not pathlib.Path('release').exists() and time.monotonic() < end:\n"
            "        time.sleep(0.02)\n"
            "    return q\n"
        )
        extra = "  - {id: slow, type: python, callable: slow.py:answer, concurrency: 1}\n"
        root = write_project(tmp_path, srv, ["x", "y", "z"])
        config = (root / "evalconfig.yaml").read_text().replace("datasets:\n", extra + "datasets:\n", 1)
        (root / "evalconfig.yaml").write_text(config)
        proc = subprocess.Popen([sys.executable, "-m", "evalx", "run", "-q"], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while srv.creations < 1 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert srv.creations == 1, "the batch waited for the slow target"
            (root / "release").write_text("")
            out, err = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, out.decode() + err.decode()
        results = cells(only_run(root))
        assert len(results) == 6 and all(r["status"] == "pass" for r in results)
    finally:
        srv.stop()


def test_batches_are_split_to_max_requests(tmp_path: Path) -> None:
    srv = BatchServer("openai").start()
    try:
        root = write_project(tmp_path, srv, [f"q{i}" for i in range(20)], batch="{poll_interval_s: 0.05, max_requests: 7}")
        done = evalx(root, "run")
        assert done.returncode == 0, done.stdout + done.stderr
        assert srv.creations == 3 and srv.batched_requests == 20
        assert sorted(len(r) for r in srv.requests_of.values()) == [6, 7, 7]
        assert len(cells(only_run(root))) == 20
    finally:
        srv.stop()


def test_a_definition_without_a_batch_api_refuses_batch_true(tmp_path: Path) -> None:
    (tmp_path / "evalconfig.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            targets:
              - id: local
                type: provider
                provider: vllm
                model: m
                base_url: http://127.0.0.1:9/v1
                batch: true
            datasets:
              - {id: d, cases: [{id: a, input: hi, assert: [{type: completed}]}]}
            """
        )
    )
    for command in (["validate"], ["run"]):
        done = evalx(tmp_path, *command)
        assert done.returncode == 2, done.stdout + done.stderr
        lines = [line for line in done.stderr.splitlines() if "batch" in line]
        assert lines, done.stderr
        assert "evalconfig.yaml:8 targets[0].batch" in lines[0] and "has no batch API" in lines[0], lines[0]
        assert "Traceback" not in done.stderr


def test_a_judge_without_a_batch_api_refuses_judge_batch(tmp_path: Path) -> None:
    (tmp_path / "evalconfig.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            targets:
              - {id: local, type: provider, provider: vllm, model: m, base_url: "http://127.0.0.1:9/v1"}
            judge:
              target: local
              batch: true
            datasets:
              - {id: d, cases: [{id: a, input: hi, assert: [{type: llm_judge, rubric: polite}]}]}
            """
        )
    )
    done = evalx(tmp_path, "validate")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "evalconfig.yaml:6 judge.batch: provider 'vllm' has no batch API" in done.stderr, done.stderr


def test_a_run_killed_while_polling_resumes_without_sending_again(tmp_path: Path, server: BatchServer) -> None:
    server.hold.set()  # batches stay in progress until the run is killed
    inputs = [f"question {i}" for i in range(15)]
    root = write_project(tmp_path, server, inputs, batch="{poll_interval_s: 0.05}")
    proc = subprocess.Popen([sys.executable, "-m", "evalx", "run", "-q"], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (server.creations < 1 or server.polls < 2):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        assert server.creations == 1 and server.polls >= 2
        run = only_run(root)
        assert json.loads((run / "batches.json").read_text())["batches"][0]["requests"] == 15  # written before the first poll
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert not (run / "results.jsonl").exists() or cells(run) == []
    server.hold.clear()
    done = evalx(root, "run", "--resume", run.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert server.creations == 1 and server.batched_requests == 15 and server.normal_calls == 0  # nothing sent twice
    results = cells(run)
    assert sorted(r["case_id"] for r in results) == sorted(f"c{i}" for i in range(15))
    assert all(r["status"] == "pass" and r["cost_usd"] == pytest.approx(NORMAL / 2) for r in results)


def test_resume_keeps_the_batch_flag(tmp_path: Path) -> None:
    """A run made with ``--batch`` and killed is resumed in batch mode without the flag: its batch polled, nothing sent again."""
    srv = BatchServer("openai").start()
    srv.hold.set()
    try:
        root = write_project(tmp_path, srv, ["a", "b"], batch="false")  # --batch over it
        proc = subprocess.Popen(
            [sys.executable, "-m", "evalx", "run", "-q", "--batch"], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not list((root / "runs").glob("*/batches.json")):
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        run = only_run(root)
        assert json.loads((run / "run.json").read_text())["batch"] is True
        srv.hold.clear()
        done = evalx(root, "run", "--resume", run.name)
        assert done.returncode == 0, done.stdout + done.stderr
        assert srv.creations == 1 and srv.normal_calls == 0
        assert all(r["cost_usd"] == pytest.approx(NORMAL / 2) for r in cells(run))
    finally:
        srv.stop()


@pytest.mark.parametrize("where", ["target", "judge"])
def test_the_judge_batches_its_calls_after_the_answers(tmp_path: Path, where: str) -> None:
    """``batch:`` on the judge's target, or ``judge.batch`` over it."""
    srv = BatchServer("openai").start()
    try:
        batch = "batch: {poll_interval_s: 0.05}"
        judge = f"""\
            judge:
              {batch if where == "judge" else ""}
              target:
                type: provider
                provider: openai
                model: gpt-4o-mini
                base_url: {srv.url}/v1
                api_key: sk-test
                pricing: {{input_per_mtok: {PRICE_IN}, output_per_mtok: {PRICE_OUT}}}
                {batch if where == "target" else ""}
            assert:
              - {{type: llm_judge, rubric: "The answer repeats the question."}}
            """
        root = write_project(tmp_path, srv, [f"question {i}" for i in range(6)], extra=textwrap.dedent(judge))
        done = evalx(root, "run")
        assert done.returncode == 0, done.stdout + done.stderr
        assert srv.creations == 2 and srv.batched_requests == 12 and srv.normal_calls == 0  # answers, then judge calls
        results = cells(only_run(root))
        assert len(results) == 6 and all(r["status"] == "pass" for r in results)
        assert all(r["judge_cost_usd"] == pytest.approx(NORMAL / 2) for r in results)
    finally:
        srv.stop()


@pytest.mark.slow
def test_ten_thousand_cells_in_batches(tmp_path: Path) -> None:
    srv = BatchServer("anthropic").start()
    try:
        n = 10_000
        root = write_project(
            tmp_path, srv, [f"question {i}" for i in range(n)], dataset_file=True, batch="{poll_interval_s: 0.05, max_requests: 4000}"
        )
        done = evalx(root, "run", "-q", timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        assert srv.creations == 3 and srv.batched_requests == n and srv.normal_calls == 0
        results = cells(only_run(root))
        assert len(results) == n and len({r["case_id"] for r in results}) == n
        summary = json.loads((only_run(root) / "summary.json").read_text())
        assert summary["cost_usd"] == pytest.approx(n * NORMAL / 2)
    finally:
        srv.stop()
