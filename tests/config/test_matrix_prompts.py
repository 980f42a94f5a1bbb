"""Prompts as matrix axes (issue 35): 2 system prompts × 3 models in one ``--matrix`` run, through the CLI.

Against the fake OpenAI server (tests/_fake_llm.py), whose answers end with the
signature the system prompt asks for, so each variant is seen to get its own
prompt; the prices come from a provider definition's price table, each model
its own (a model with no price is "unknown", never another model's price).
"""

from __future__ import annotations

import html
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import OPENAI_KEY, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from click.testing import CliRunner, Result
from results_file import read_cells

from evalx.cli import main

COMPLETIONS = "/v1/chat/completions"
MODELS = ("m-cheap", "m-dear", "m-unpriced")
PROMPTS = {"terse": "T", "chatty": "C"}
VARIANTS = [f"bot[model={m},system_file={p}]" for m in MODELS for p in PROMPTS]


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # errors name files relative to here


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def project(tmp_path: Path, url: str, axes: str = "", more_files: dict[str, str] | None = None) -> Path:
    axes = axes or "model: [m-cheap, m-dear, m-unpriced]\nsystem_file: [prompts/terse.md, prompts/chatty.md]"
    write(
        tmp_path,
        {
            "prompts/terse.md": "You are terse. Sign every answer as {{ vars.sig }}-T.\n{% include 'prompts/policy.md' %}\n",
            "prompts/chatty.md": "You are chatty. Sign every answer as {{ vars.sig }}-C.\n",
            "prompts/policy.md": "Refunds within 30 days.",
            # a price table in a provider definition: each model its own price
            "providers/fakeai.yaml": """\
                name: fakeai
                extends: openai
                pricing:
                  m-cheap: {input_per_mtok: 1.0, output_per_mtok: 2.0}
                  m-dear: {input_per_mtok: 10.0, output_per_mtok: 20.0}
                """,
            **(more_files or {}),
        },
    )
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: prompts-x-models
            vars: {{sig: BOT}}
            providers_dir: providers
            defaults: {{retries: 0}}
            targets:
              - id: bot
                type: provider
                provider: fakeai
                model: m-cheap
                base_url: {url}/v1
                api_key: {OPENAI_KEY}
                system: "The target's own prompt: never sent in the matrix."
                pricing: {{input_per_mtok: 1.0, output_per_mtok: 2.0}}   # m-cheap's: never another model's
            matrix:
              targets: [bot]
              params:
            """
        )
        + textwrap.indent(axes, " " * 4)
        + "\n"
        + textwrap.dedent(
            """\
            datasets:
              - id: smoke
                cases:
                  - {id: sum, input: "What is 2 + 2?", assert: [{type: contains, value: "4"}]}
                  - {id: capital, input: "What is the capital of France?", assert: [{type: icontains, value: paris}]}
            """
        ),
        encoding="utf-8",
    )
    return config


def only_run(tmp_path: Path, before: set[Path] = frozenset()) -> Path:  # type: ignore[assignment]
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and p not in before]
    return run


def test_two_system_prompts_times_three_models_in_one_matrix(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, server.url)
    validated = cli("validate", "-c", str(config))
    assert validated.exit_code == 0 and "6 variants" in validated.output, validated.output
    assert "warning" not in validated.output  # system_file is a target key, not a request param the provider does not know

    result = cli("run", "-c", str(config), "--matrix")
    assert result.exit_code == 0, result.output
    run = only_run(tmp_path)

    # each variant got its own prompt, rendered (vars and the include), with its own model
    bodies = server.bodies(COMPLETIONS)
    assert len(bodies) == 12
    sent = {(b["model"], b["messages"][0]["content"]) for b in bodies}
    assert sent == {
        (m, "You are terse. Sign every answer as BOT-T.\nRefunds within 30 days.\n")
        if p == "terse"
        else (m, "You are chatty. Sign every answer as BOT-C.\n")
        for m in MODELS
        for p in PROMPTS
    }
    cells = read_cells(run)
    for cell in cells:
        letter = "T" if "system_file=terse" in cell["target"] else "C"
        assert cell["output"]["text"].endswith(f" — BOT-{letter}"), cell
        assert cell["status"] == "pass", cell

    # the terminal, the HTML report, the JUnit file and the pairwise table name each prompt × model variant
    summary = json.loads((run / "summary.json").read_text())
    assert list(summary["per_target"]) == VARIANTS
    assert [v["id"] for v in summary["matrix"]["variants"]] == VARIANTS
    assert summary["matrix"]["variants"][0]["values"] == {"model": "m-cheap", "system_file": "prompts/terse.md"}
    out = " ".join(result.output.split())
    for variant in VARIANTS:
        assert variant.split("[")[1].split(",")[1].rstrip("]") in out  # matrix headers put each key=value on its own line
    report = (run / "report.html").read_text()
    junit = (run / "junit.xml").read_text()
    for variant in VARIANTS:
        assert html.escape(variant) in report, variant
        assert variant in junit, variant
    pairs = summary["pairwise"]
    assert len(pairs) == 15 and {p["a"] for p in pairs} | {p["b"] for p in pairs} == set(VARIANTS)
    text = (run / "summary.txt").read_text()
    for variant in VARIANTS:
        assert f"{variant} vs" in text or f"vs {variant}" in text, variant

    # costs: each model its own price (equal tokens, different prices); no price is "unknown", never m-cheap's
    per = summary["per_target"]

    def cost(variant: str) -> Any:
        return per[variant]["cost_usd"]

    for prompt in PROMPTS:
        cheap, dear, unpriced = (f"bot[model={m},system_file={prompt}]" for m in MODELS)
        cheap_cells = [c for c in cells if c["target"] == cheap]
        expected = sum(c["output"]["usage"]["input_tokens"] * 1.0 + c["output"]["usage"]["output_tokens"] * 2.0 for c in cheap_cells) / 1e6
        assert cost(cheap) == pytest.approx(expected)
        assert cost(dear) == pytest.approx(10 * expected)  # the same tokens at ten times the price
        assert not cost(unpriced) and per[unpriced]["cost_missing_cells"] == 2
        assert all(c["output"]["cost_usd"] is None for c in cells if c["target"] == unpriced)
        # said "unknown" in the per-target table of summary.txt and of the HTML report, never $0 or m-cheap's price
        assert any(line.startswith(unpriced + " ") and line.split()[-1] == "unknown" for line in text.splitlines()), text
    assert report.count('<td class="num">unknown') == 2

    # the second run is served from the cache; an edit to the terse prompt's included file misses for its 3 variants only
    assert cli("run", "-c", str(config), "--matrix").exit_code == 0 and server.count(COMPLETIONS) == 12
    (tmp_path / "prompts/policy.md").write_text("Refunds within 14 days.", encoding="utf-8")
    assert cli("run", "-c", str(config), "--matrix").exit_code == 0
    assert server.count(COMPLETIONS) == 18
    assert {b["messages"][0]["content"].split(".")[0] for b in server.bodies(COMPLETIONS)[12:]} == {"You are terse"}


def test_a_changed_prompt_file_is_a_changed_plan_for_resume(server: FakeLLMServer, tmp_path: Path) -> None:
    config = project(tmp_path, server.url, "system_file: [prompts/terse.md, prompts/chatty.md]")
    assert cli("run", "-c", str(config), "--matrix").exit_code == 0
    run = only_run(tmp_path)
    again = cli("run", "-c", str(config), "--matrix", "--resume", run.name)
    assert again.exit_code == 0, again.output  # the same plan: nothing left to run
    chatty = tmp_path / "prompts/chatty.md"
    chatty.write_text(chatty.read_text().replace("chatty", "very chatty"), encoding="utf-8")
    changed = cli("run", "-c", str(config), "--matrix", "--resume", run.name)
    assert changed.exit_code == 2 and "Traceback" not in changed.output
    assert "cannot resume" in changed.output, changed.output


def test_labels_per_value_pricing_and_exclude_by_label(server: FakeLLMServer, tmp_path: Path) -> None:
    axes = """\
model:
  - m-cheap
  - {value: m-unpriced, pricing: {input_per_mtok: 3, output_per_mtok: 6}}
system:
  - {label: pirate, value: "Talk like a pirate. Sign every answer as P."}
  - "Sign every answer as S."
system_file:
"""
    axes = axes.replace("system_file:\n", "")
    config = project(tmp_path, server.url, axes)
    text = config.read_text().replace("  targets: [bot]\n", "  targets: [bot]\n  exclude: [{model: m-unpriced, system: pirate}]\n")
    config.write_text(text, encoding="utf-8")
    result = cli("run", "-c", str(config), "--matrix")
    assert result.exit_code == 0, result.output
    summary = json.loads((only_run(tmp_path) / "summary.json").read_text())
    ids = list(summary["per_target"])
    assert ids == [
        "bot[model=m-cheap,system=pirate]",
        "bot[model=m-cheap,system=Sign every answer as S.]",
        "bot[model=m-unpriced,system=Sign every answer as S.]",
    ]
    assert summary["matrix"]["variants"][0]["values"] == {"model": "m-cheap", "system": "pirate"}
    cells = {c["target"]: c for c in read_cells(only_run(tmp_path))}
    assert cells["bot[model=m-cheap,system=pirate]"]["output"]["text"].endswith(" — P")
    cheap, priced = (summary["per_target"][i]["cost_usd"] for i in ids[1:])
    assert priced == pytest.approx(3 * cheap)  # the value's own pricing: equal tokens at three times m-cheap's price


@pytest.mark.parametrize(
    ("axes", "error"),
    [
        (
            "system_file: [prompts/terse.md, prompts/nope.md]",
            "evalconfig.yaml:18 matrix.params.system_file[1]: system_file 'prompts/nope.md': no such file in ./",
        ),
        (
            "system_file:\n  - prompts/terse.md\n  - {label: terse, value: prompts/chatty.md}",
            "evalconfig.yaml:20 matrix.params.system_file[1]: values 0 and 1 of axis 'system_file' are both named 'terse': give them other labels",
        ),
        (
            "system:\n  - Short.\n  - " + "A long system prompt that goes on and on, past what a variant id should hold.",
            "evalconfig.yaml:20 matrix.params.system[1]: a system longer than a short line needs a name in the variant id: "
            "write {label: NAME, value: ...}, or use a system_file axis",
        ),
        (
            "temperature:\n  - {value: 0, pricing: {input_per_mtok: 1, output_per_mtok: 1}}",
            "evalconfig.yaml:19 matrix.params.temperature[0].pricing: pricing: goes with a model value (an axis named model)",
        ),
        (
            "system: [a, b]\nsystem_file: [prompts/terse.md]",
            "evalconfig.yaml:18 matrix.params.system: give axis 'system' or 'system_file', not both",
        ),
        (
            "system_file: [prompts/terse.md, prompts/broken.md]",
            "evalconfig.yaml:18 matrix.params.system_file[1].value: system_file prompts/broken.md: template syntax error "
            "(template line 1): Expected an expression, got 'end of statement block'",
        ),
        (
            "model:\n  - {value: m-dear, pricing: {input_per_mtok: 1}}",
            "evalconfig.yaml:19 matrix.params.model[0].pricing: pricing needs output_per_mtok",
        ),
    ],
)
def test_axis_values_are_checked_at_their_own_line(server: FakeLLMServer, tmp_path: Path, axes: str, error: str) -> None:
    config = project(tmp_path, server.url, axes, {"prompts/broken.md": "Broken {% if %}\n"})
    validated = cli("validate", "-c", str(config))
    assert validated.exit_code == 2 and "Traceback" not in validated.output, validated.output
    assert error in validated.output.splitlines(), validated.output
    ran = cli("run", "-c", str(config), "--matrix")
    assert ran.exit_code == 2 and server.count() == 0


def test_files_that_share_a_stem_are_named_by_path_and_include_entries_read_files(server: FakeLLMServer, tmp_path: Path) -> None:
    files = {"a/v1.md": "Sign every answer as A.", "b/v1.md": "Sign every answer as B.", "prompts/user.md": "Q: {{ case.input }}"}
    axes = "system_file: [a/v1.md, b/v1.md]"
    config = project(tmp_path, server.url, axes, files)
    text = config.read_text().replace(
        "  targets: [bot]\n", "  targets: [bot]\n  include: [{system_file: b/v1.md, prompt_file: prompts/user.md}]\n"
    )
    config.write_text(text, encoding="utf-8")
    result = cli("run", "-c", str(config), "--matrix", "--case", "sum")
    assert result.exit_code == 0, result.output
    summary = json.loads((only_run(tmp_path) / "summary.json").read_text())
    assert list(summary["per_target"]) == ["bot[system_file=a/v1.md]", "bot[prompt_file=user,system_file=b/v1.md]"]
    bodies = server.bodies(COMPLETIONS)
    assert [b["messages"] for b in bodies] == [
        [{"role": "system", "content": "Sign every answer as A."}, {"role": "user", "content": "What is 2 + 2?"}],
        [{"role": "system", "content": "Sign every answer as B."}, {"role": "user", "content": "Q: What is 2 + 2?"}],
    ]
