"""examples/rag runs offline through the real CLI: the scripted judge grades every case as its README says."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main

CONFIG = "examples/rag/evalconfig.yaml"


def test_the_rag_example_runs_offline(example_project: Path) -> None:
    runner = CliRunner()
    validate = runner.invoke(main, ["validate", "-c", str(example_project / CONFIG)])
    assert validate.exit_code == 0, validate.output

    res = runner.invoke(main, ["run", "-c", str(example_project / CONFIG)])
    assert res.exit_code == 1, res.output  # the warranty case fails on purpose
    assert "warranty — faithfulness: 1 unsupported claim: 'It also covers accidental damage.'" in res.output
    assert "Traceback" not in res.output

    (run_dir,) = list((example_project / "examples" / "rag" / "runs").iterdir())
    rows = {(r["dataset"], r["case_id"]): r for r in read_cells(run_dir)}
    status = {key: row["status"] for key, row in rows.items()}
    assert status == {
        ("support", "refund-window"): "pass",
        ("support", "warranty"): "fail",
        ("support", "out-of-scope"): "pass",
        ("retrieved", "1"): "pass",
        ("retrieved", "2"): "pass",
    }
    checks = {(key[1], a["type"]): a for key, row in rows.items() for a in row["assertions"] if key[0] == "support"}
    # every kind of check ran and was graded (none inconclusive, none an error)
    kinds = {a["type"] for row in rows.values() for a in row["assertions"]}
    assert kinds == {"faithfulness", "answer_relevance", "context_recall", "g_eval", "rouge_l", "refusal"}
    assert all(a["passed"] is not None and "error" not in a for row in rows.values() for a in row["assertions"])

    warranty = checks[("warranty", "faithfulness")]
    assert warranty["details"]["unsupported"] == ["It also covers accidental damage."]
    assert checks[("warranty", "answer_relevance")]["passed"] is True  # relevant, but not grounded
    assert checks[("refund-window", "g_eval")]["details"]["rating"] == 5
    assert checks[("out-of-scope", "refusal")]["passed"] is True
    # the context came inline, from docs/warranty.md (relative to cases.yaml) and from the CSV column
    assert checks[("warranty", "faithfulness")]["details"]["passages"] == 1
    assert rows[("retrieved", "1")]["assertions"][0]["details"]["passages"] == 2
