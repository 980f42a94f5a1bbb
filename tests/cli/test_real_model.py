"""examples/local-model/ run for real through the CLI against a llama.cpp server (marker ``real_model``).

The tests run when ``EVALX_REAL_MODEL_URL`` names the server's ``/v1`` URL and are skipped otherwise,
so the default test run (and CI) never needs the model. How to set the server up and run them:
examples/local-model/README.md. The model is a 270M base model, so the tests check the plumbing
(answers, usage, time to first token, embeddings, a judge verdict or a classified judge error), never
the quality of an answer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from results_file import read_cells

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local-model"
REAL_URL = os.environ.get("EVALX_REAL_MODEL_URL", "")

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(not REAL_URL, reason="EVALX_REAL_MODEL_URL is not set (examples/local-model/README.md)"),
]


@dataclass
class RealRun:
    code: int
    stdout: str
    stderr: str
    seconds: float
    run_dir: Path
    cells: list[dict[str, Any]]
    summary: dict[str, Any]

    def cells_of(self, target: str) -> list[dict[str, Any]]:
        cells = [c for c in self.cells if c["target"] == target]
        assert cells, f"no cell of {target}"
        return cells


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> RealRun:
    """The example config run once, as a user runs it (`python -m evalx run -c ...`), in a folder of its own."""
    project = tmp_path_factory.mktemp("local-model")
    shutil.copy(EXAMPLE / "evalconfig.yaml", project / "evalconfig.yaml")
    shutil.copytree(EXAMPLE / "providers", project / "providers")
    env = {**os.environ, "EVALX_REAL_MODEL_URL": REAL_URL}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "evalx", "run", "-c", str(project / "evalconfig.yaml")],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    seconds = time.monotonic() - start
    runs = sorted((project / "runs").iterdir()) if (project / "runs").is_dir() else []
    assert runs, f"no run folder; exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    run_dir = runs[-1]
    return RealRun(
        code=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        seconds=seconds,
        run_dir=run_dir,
        cells=read_cells(run_dir),
        summary=json.loads((run_dir / "summary.json").read_text(encoding="utf-8")),
    )


def assertion(cell: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [a for a in cell["assertions"] if a["type"] == kind]
    assert len(found) == 1, f"{cell['case_id']}: {kind} assertions: {found}"
    return found[0]


def test_the_run_finishes_without_a_crash(real_run: RealRun) -> None:
    # 0: every plumbing check held; 1: something failed or errored (named in the cells below), never 2 or 3
    assert real_run.code in (0, 1), real_run.stdout + real_run.stderr
    assert "Traceback" not in real_run.stderr
    assert all(c["traceback"] is None for c in real_run.cells)
    # 3 cases x the two chat targets (the embedder and the judge are not evaluated)
    assert sorted({c["target"] for c in real_run.cells}) == ["gemma-chat", "gemma-stream"]
    assert len(real_run.cells) == 6


@pytest.mark.parametrize("target", ["gemma-chat", "gemma-stream"])
def test_answers_complete(real_run: RealRun, target: str) -> None:
    for cell in real_run.cells_of(target):
        assert cell["error"] is None, cell["error"]
        assert assertion(cell, "completed")["passed"] is True
        assert cell["output"]["text"].strip()
        assert cell["latency_ms"] > 0


def test_chat_answers_report_usage(real_run: RealRun) -> None:
    for cell in real_run.cells_of("gemma-chat"):
        usage = cell["output"]["usage"]
        assert usage["input_tokens"] > 0 and 0 < usage["output_tokens"] <= 32, usage  # params.max_tokens: 32
        assert cell["ttft_ms"] is None  # not streamed: no first token to time
        assert cell["output"]["request"]["body"]["max_tokens"] == 32


def test_streamed_answers_have_ttft_before_the_end_and_usage_or_a_note(real_run: RealRun) -> None:
    for cell in real_run.cells_of("gemma-stream"):
        assert cell["ttft_ms"] is not None, cell["case_id"]
        assert 0 < cell["ttft_ms"] < cell["latency_ms"], (cell["ttft_ms"], cell["latency_ms"])
        note = (cell["output"].get("raw") or {}).get("usage_note")
        if note is not None:  # llama-cpp-python 0.3.36 sends no usage in a stream (stream_options ignored): said so
            assert "sent no usage" in note
            assert cell["cost_usd"] is None and cell["output"]["cost_note"] == "no usage in response"
        else:
            usage = cell["output"]["usage"]
            assert usage["input_tokens"] > 0 and 0 < usage["output_tokens"] <= 32, usage


def test_embeddings_give_a_similarity_score(real_run: RealRun) -> None:
    graded = [c for c in real_run.cells if c["case_id"] in ("capital", "colours")]
    assert len(graded) == 4
    for cell in graded:
        verdict = assertion(cell, "semantic_similar")
        assert verdict.get("error") is None, verdict
        assert verdict["passed"] in (True, False)
        cosine = verdict["details"]["cosine"]
        assert isinstance(cosine, float) and -1.0 <= cosine <= 1.0
        assert verdict["details"]["calls"] == 2


def test_the_judge_gives_a_verdict_or_a_classified_error(real_run: RealRun) -> None:
    judged = [c for c in real_run.cells if c["case_id"] == "judged"]
    assert len(judged) == 2
    for cell in judged:
        verdict = assertion(cell, "llm_judge")
        if verdict["passed"] is None:  # a 270M base model may answer something that is not a verdict
            assert verdict["error"] and "Traceback" not in verdict["error"], verdict
            assert cell["status"] == "error" and cell["traceback"] is None
        else:
            assert verdict["reason"] and verdict["details"]["calls"] == 1
        assert verdict["details"]["input_tokens"] > 0  # the judge call went out and was answered


def test_summary_and_report_show_ttft(real_run: RealRun) -> None:
    per_target = real_run.summary["per_target"]
    assert per_target["gemma-stream"]["ttft_ms"]["p50"] > 0
    assert per_target["gemma-stream"]["ttft_ms"]["p50"] < per_target["gemma-stream"]["latency_ms"]["p50"]
    assert per_target["gemma-chat"]["ttft_ms"]["p50"] is None
    assert real_run.summary["ttft_ms"]["p50"] > 0
    html = (real_run.run_dir / "report.html").read_text(encoding="utf-8")
    assert "TTFT p50" in html
    assert "ttft p50" in (real_run.run_dir / "summary.txt").read_text(encoding="utf-8")
