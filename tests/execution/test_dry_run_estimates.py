"""``evalx run --dry-run`` estimates, through the CLI: input tokens a cell (tiktoken for OpenAI models when it is
installed, else ~4 characters a token), the cost at the normal and the batch price, and the time at the known rate limit.

tiktoken's encodings are downloaded on first use (not possible offline): a stand-in ``tiktoken`` package, put first on
the path, counts words, so the test sees which counter was used.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

STAND_IN = """\
def encoding_name_for_model(model):
    if model.startswith("gpt-"):
        return "o200k_base"
    raise KeyError(model)


class _Encoding:
    def encode(self, text, disallowed_special=()):
        return text.split()


def get_encoding(name):
    return _Encoding()
"""

CONFIG = """\
version: 1
targets:
  - {id: oa, type: provider, provider: openai, model: gpt-4o-mini, system: "be brief",
     pricing: {input_per_mtok: 1, output_per_mtok: 10}, params: {max_tokens: 100}, rate_limit: {rpm: 30}}
  - {id: an, type: provider, provider: anthropic, model: claude-haiku-4-5, api_key: x, system: "be brief",
     pricing: {input_per_mtok: 1, output_per_mtok: 10}, params: {max_tokens: 100}}
  - {id: local, type: provider, provider: vllm, model: m, base_url: "http://127.0.0.1:9/v1",
     pricing: {input_per_mtok: 1, output_per_mtok: 10}, params: {max_tokens: 100}}
datasets:
  - id: d
    cases:
"""


def project(root: Path, n: int) -> Path:
    text = "one two three four five six seven eight nine ten eleven twelve"  # 12 words, 62 characters
    cases = "".join(f"      - {{id: c{i}, input: {text!r}, assert: [{{type: completed}}]}}\n" for i in range(n))
    (root / "evalconfig.yaml").write_text(CONFIG + cases)
    stand_in = root / "stand_in" / "tiktoken"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text(textwrap.dedent(STAND_IN))
    return root


def dry_run(root: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "stand_in"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "evalx", "run", "--dry-run", *args], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (root / "runs").exists()
    return done.stdout


def line_of(out: str, target: str, after: str) -> str:
    section = out.split(after, 1)[1]
    return next(line for line in section.splitlines() if line.strip().startswith(target + " "))


def test_tokens_cost_at_both_prices_and_time(tmp_path: Path) -> None:
    out = dry_run(project(tmp_path, 60))
    tokens = "Estimated input tokens a cell"
    # OpenAI: tiktoken's count (the stand-in's words: 2 of the system prompt, 12 of the input)
    assert "~14 input tokens a cell (tiktoken o200k_base)" in line_of(out, "oa", tokens)
    # others: ~4 characters a token ("be brief" + newlines + the input: 73 characters)
    assert "~19 input tokens a cell (~4 characters a token)" in line_of(out, "an", tokens)
    # time: 60 cells at 30 requests a minute; unknown without a rate limit
    assert "time: ≥ ~2m at rate_limit 30 rpm" in line_of(out, "oa", tokens)
    assert "time: unknown (no rate_limit.rpm)" in line_of(out, "an", tokens)
    cost = "Estimated cost"
    # 60 × 14 input tokens at $1/M + 60 × 100 output at $10/M = $0.06084; the batch price is half
    assert "≤ $0.0608 · batch ≤ $0.0304" in line_of(out, "oa", cost)
    assert "≤ $0.0611 · batch ≤ $0.0306" in line_of(out, "an", cost)
    assert "· no batch API" in line_of(out, "local", cost)
    assert "with --batch" in out


def test_batch_mode_targets_are_estimated_at_the_batch_price(tmp_path: Path) -> None:
    out = dry_run(project(tmp_path, 4), "--batch")
    assert "(batch mode)" in line_of(out, "an", "Estimated cost")
    assert "(batch mode)" not in line_of(out, "local", "Estimated cost")  # vllm has no batch API: normal calls
    assert "with the batch-mode targets at their batch price" in out
    assert "a batch: up to 24 h" in line_of(out, "oa", "Estimated input tokens a cell")
