"""The default config teaches the right lessons (issue 31, item 4): a real regression for a real reason, nothing skipped
for a missing judge, and keyword checks whose case-sensitivity shows in the reason."""

from __future__ import annotations

import json
from pathlib import Path

from cli_project import evalx
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main


def test_the_demo_fails_only_the_refactor_and_says_why(example_project: Path) -> None:
    proc = evalx("run", cwd=example_project)
    assert proc.returncode == 1, proc.stderr
    (run_dir,) = (example_project / "runs").iterdir()
    cells = read_cells(run_dir)
    assert len(cells) == 38 and not [c for c in cells if c["status"] == "skipped"]  # the offline judge grades every check
    assert {c["status"] for c in cells if c["target"] == "support-bot"} == {"pass"}  # the production bot is right
    failing = {c["case_id"]: c for c in cells if c["status"] != "pass"}
    assert set(failing) == {"refund-window", "damaged-refund", "support-hours", "prompt-injection"}
    assert {c["target"] for c in failing.values()} == {"support-bot-v2"}
    reasons = {case: [a["reason"] for a in c["assertions"] if a["passed"] is False] for case, c in failing.items()}
    assert reasons["refund-window"] == ["expected 30 (±1%), found [14]"]  # a wrong policy, not a brittle check
    assert any("issue_refund" in r for r in reasons["damaged-refund"])  # a refund without the purchase check
    assert "output_tokens=173 > 60" in reasons["support-hours"]
    assert any("system prompt" in r for r in reasons["prompt-injection"])
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["inconclusive_assertions"] == 0 and summary["judge"]["calls"] == 4


def test_a_keyword_missed_only_by_case_says_so(tmp_path: Path, monkeypatch: object) -> None:
    (tmp_path / "bot.py").write_text("def answer(q):\n    return \"Click 'Forgot password' and check your email.\"\n", encoding="utf-8")
    (tmp_path / "cases.jsonl").write_text(
        '{"id": "reset", "input": "I forgot my password", "expectedKeywords": ["forgot password", "email"]}\n'
        '{"id": "start", "input": "x", "assert": [{"type": "starts_with", "value": "click"}]}\n'
        '{"id": "absent", "input": "x", "assert": [{"type": "contains", "value": "sms"}]}\n',
        encoding="utf-8",
    )
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: 'bot.py:answer'}]\ndatasets: [{id: d, path: cases.jsonl}]\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["run", "-c", str(config)])
    assert result.exit_code == 1, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    reason = {c["case_id"]: next(a["reason"] for a in c["assertions"] if a["passed"] is False) for c in read_cells(run_dir)}
    assert reason["reset"].startswith(
        "missing 'forgot password' (case-sensitive: the output has 'Forgot password'; icontains ignores case) in"
    )
    assert reason["start"].startswith(
        "expected to start with 'click' (case-sensitive: the output has 'Click'; a regex with flags: i ignores case)"
    )
    assert reason["absent"].startswith("expected to contain 'sms' (case-sensitive), got")  # not there in any case: just the rule
    assert "case-sensitive: the output has 'Forgot password'" in result.output  # and the terminal shows it


def test_the_readmes_first_screen_shows_what_evalx_run_prints(example_project: Path) -> None:
    """README's "Run it, read the result" is the real output of the default run (its run id and duration aside)."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    shown = readme.split("```console\n$ evalx run\n", 1)[1].split("```", 1)[0]
    proc = evalx("run", cwd=example_project)

    def masked(text: str) -> str:
        return re.sub(r" in \d[\d.]*m?s", " in Xms", re.sub(r"\d{8}-\d{6}-[0-9a-f]{6}", "RUN", text))

    assert masked(proc.stdout) == masked(shown)
    assert readme.index("## Install") < readme.index("## Run it, read the result") < readme.index("## A config")
