"""``max_response_bytes`` bounds what a cell stores, not only what an HTTP response holds (issue 30, class 9).

Through the real CLI: a Python target returning 2 MB, a simulated user writing
2 MB a turn, a judge replying 2 MB and a scripted conversation whose replies add up past the limit
each end as that cell's error naming ``max_response_bytes``, and the results
line stays small; the other cells of the run are unaffected.
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_project import evalx, evalx_each
from results_file import read_cells

CODE = """
import json, pathlib

def big(question):
    return "b" * 2_000_000

def big_tools(question):
    return {"text": "ok", "tool_calls": [{"name": "t", "args": {"blob": "x" * 2_000_000}}]}

def big_extra(question):
    return {"text": "ok", "debug": ["y" * 1000] * 2000}

def fine(question):
    return "fine"

def big_judge(prompt):
    return "PASS " + "j" * 2_000_000

def chatty_user(messages, instructions):
    return "u" * 2_000_000

def small_user(messages, instructions):
    return "u" * 30_000

def agent(messages):
    pathlib.Path("agent_saw.txt").open("a").write(str(sum(len(m["content"]) for m in messages)) + "\\n")
    return "a" * 40_000
"""

CONFIG = """\
version: 1
defaults: {max_response_bytes: 100000, retries: 0}
targets:
  - {id: big, type: python, callable: "code.py:big"}
  - {id: big_tools, type: python, callable: "code.py:big_tools"}
  - {id: big_extra, type: python, callable: "code.py:big_extra"}
  - {id: fine, type: python, callable: "code.py:fine"}
  - {id: agent, type: python, callable: "code.py:agent"}
  - {id: chatty_user, type: python, callable: "code.py:chatty_user", max_response_bytes: 67108864}
  - {id: small_user, type: python, callable: "code.py:small_user"}
  - {id: big_judge, type: python, callable: "code.py:big_judge"}
judge: {target: big_judge}
datasets:
  - id: one
    targets: [big, big_tools, big_extra, fine]
    cases:
      - {id: q, input: hi, assert: [{type: completed}]}
  - id: judged
    targets: [fine]
    cases:
      - {id: j, input: hi, assert: [{type: llm_judge, rubric: is fine}]}
  - id: talk
    targets: [agent]
    cases:
      - id: flood
        simulate: {target: chatty_user, instructions: flood it, max_turns: 5}
        assert: [{type: completed}]
      - id: adds-up
        simulate: {target: small_user, instructions: talk, max_turns: 5}
        assert: [{type: completed}]
      - id: scripted
        turns: [{input: a}, {input: b}, {input: c}]
        assert: [{type: completed}]
"""


def test_max_response_bytes_bounds_python_targets_turns_and_conversations(tmp_path: Path) -> None:
    (tmp_path / "code.py").write_text(CODE)
    (tmp_path / "evalconfig.yaml").write_text(CONFIG)
    targets = ["--target", "big", "--target", "big_tools", "--target", "big_extra", "--target", "fine", "--target", "agent"]
    done = evalx("run", "-q", *targets, cwd=tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr  # every cell of some target errored
    assert "Traceback" not in done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    results = run_dir / "results.jsonl"
    assert results.stat().st_size < 400_000  # 2 MB a turn, five turns, four 2 MB answers: none of it stored
    longest = max(len(line) for line in results.read_bytes().splitlines())
    assert longest < 200_000
    cells = {(c["target"], c["case_id"]): c for c in read_cells(run_dir)}

    for target in ("big", "big_tools", "big_extra"):
        cell = cells[(target, "q")]
        assert cell["status"] == "error"
        assert "max_response_bytes (100,000 bytes)" in cell["error"] and "evalx cannot store" in cell["error"], cell["error"]
    assert cells[("fine", "q")]["status"] == "pass"
    # a judge's reply is bounded by the judge target's own max_response_bytes: the assertion errors, nothing of it stored
    (judged,) = cells[("fine", "j")]["assertions"]
    assert judged["passed"] is None and "max_response_bytes (100,000 bytes)" in judged["error"], judged

    # a simulated user's 2 MB message (under its own limit): never sent to the agent, the cell's error names the limit
    flood = cells[("agent", "flood")]
    assert flood["status"] == "error" and flood["error"].startswith("turn 1: ")
    assert "max_response_bytes (100,000 bytes)" in flood["error"] and "not sent" in flood["error"]
    (turn,) = flood["turns"]
    assert len(turn["input"]) < 1000 and "not kept" in turn["input"]

    # messages and replies each under the limit that add up past it: the turn that crosses it ends the conversation
    adds_up = cells[("agent", "adds-up")]
    assert adds_up["status"] == "error" and adds_up["error"].startswith("turn 2: "), adds_up["error"]
    assert "conversation" in adds_up["error"] and "max_response_bytes (100,000 bytes)" in adds_up["error"]
    assert len(adds_up["turns"]) == 2 and adds_up["turns"][0]["output"]["text"] == "a" * 40_000

    scripted = cells[("agent", "scripted")]
    assert scripted["status"] == "error" and scripted["error"].startswith("turn 3: "), scripted["error"]
    assert "max_response_bytes" in scripted["error"]

    # the agent never saw the flood: the largest history it was called with is the small user's conversation
    saw = [int(n) for n in (tmp_path / "agent_saw.txt").read_text().split()]
    assert max(saw) <= 100_000
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["totals"]["error"] == 7, summary["totals"]


CHECKS = """
from evalx import Verdict, assertion

def huge_reason(output, ctx):
    return {"pass": False, "reason": "r" * 2_000_000}

def huge_raise(output, ctx):
    raise ValueError("e" * 2_000_000)

@assertion("huge_details")
def huge_details(ctx) -> Verdict:
    return Verdict(True, 1.0, "fine", details={"calls": 1, "dump": "d" * 2_000_000, "rows": ["x" * 1000] * 2000})
"""

CHECKS_CONFIG = """\
version: 1
plugins: [checks.py]
defaults: {max_response_bytes: 100000}
targets:
  - {id: fine, type: python, callable: "code.py:fine"}
  - {id: agent, type: python, callable: "code.py:agent"}
datasets:
  - id: one
    targets: [fine]
    cases:
      - id: reason
        input: hi
        assert: [{type: python, callable: "checks.py:huge_reason"}]
      - id: raises
        input: hi
        assert: [{type: python, callable: "checks.py:huge_raise"}]
      - id: details
        input: hi
        assert: [{type: huge_details}]
  - id: talk
    targets: [agent]
    cases:
      - id: turn-check
        turns: [{input: a, assert: [{type: python, callable: "checks.py:huge_reason"}]}]
"""


def test_max_response_bytes_bounds_what_a_check_stores(tmp_path: Path) -> None:
    """A check's reason, exception and details come from user code: each is bounded like a target's answer (issue 30, class 9)."""
    (tmp_path / "code.py").write_text(CODE)
    (tmp_path / "checks.py").write_text(CHECKS)
    (tmp_path / "evalconfig.yaml").write_text(CHECKS_CONFIG)
    (done,) = evalx_each(tmp_path, ["run", "-q"])  # a process of its own: the plugin's type stays out of this one's registry
    assert done.returncode in (1, 3), done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    results = run_dir / "results.jsonl"
    assert results.stat().st_size < 1_000_000, results.stat().st_size  # four checks of 2 MB or more each: none of it stored
    cells = {c["case_id"]: c for c in read_cells(run_dir)}

    (reason,) = cells["reason"]["assertions"]
    assert reason["passed"] is False and len(reason["reason"]) < 100_100
    assert reason["reason"].endswith("(clipped at max_response_bytes, 100,000)")
    (raised,) = cells["raises"]["assertions"]
    assert raised["passed"] is None and cells["raises"]["status"] == "error"
    assert raised["error"].startswith("ValueError: eee") and raised["error"].endswith("(clipped at max_response_bytes, 100,000)")
    assert len(raised["error"]) < 100_100 and len(raised["reason"]) < 100_100
    (details,) = cells["details"]["assertions"]
    assert details["passed"] is True and cells["details"]["status"] == "pass"
    kept = details["details"]
    assert kept["calls"] == 1 and "dump" not in kept and "rows" not in kept  # the small keys stay, the large ones go, named
    assert "left out 'dump', 'rows'" in kept["clipped"] and "max_response_bytes (100,000 bytes)" in kept["clipped"]
    (turn,) = cells["turn-check"]["assertions"]  # a turn's own check, in a conversation
    assert turn["turn"] == 1 and turn["reason"].endswith("(clipped at max_response_bytes, 100,000)")


def test_a_huge_error_is_one_short_line_on_the_terminal(tmp_path: Path) -> None:
    """Every cell of a target raising 3 MB (under the default max_response_bytes): the end-of-run line stays one short line."""
    (tmp_path / "code.py").write_text("def boom(q):\n    raise RuntimeError('first ' + 'x' * 3_000_000)\n")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\ntargets:\n  - {id: boom, type: python, callable: 'code.py:boom'}\n"
        "datasets:\n  - id: d\n    cases:\n      - {id: a, input: hi}\n      - {id: b, input: ho}\n"
    )
    done = evalx("run", "-q", cwd=tmp_path)
    assert done.returncode == 3, done.stderr[:2000]
    (line,) = [line for line in done.stderr.splitlines() if "every cell failed" in line]
    assert line.startswith("target 'boom': every cell failed (2): RuntimeError: first xxx") and line.endswith(" …"), line[:200]
    assert len(done.stdout) + len(done.stderr) < 5000
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert all(len(c["error"]) > 3_000_000 for c in read_cells(run_dir))  # the cells keep their whole error
