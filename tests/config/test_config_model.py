"""The typed config: the records write the shipped schema, and every config the schema accepts becomes records carrying every key."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from click.testing import CliRunner

import evalx
from evalx.cli import main
from evalx.common.typeschema import object_schema, schema_of
from evalx.config.loader import load_config
from evalx.config.model import EvalConfig
from evalx.config.schema import config_schema
from evalx.judge.spec import JudgeSettings, judge_settings
from evalx.results.gates import CostGate, Gates, gates_spec
from evalx.targets.spec import EngineTargetSpec, ProviderTargetSpec, PythonTargetSpec, target_spec

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "schemas" / "evalconfig.schema.json"
VALID = sorted((ROOT / "tests" / "configs" / "valid").glob("*.yaml")) + sorted(
    (ROOT / "src" / "evalx" / "config" / "starters").glob("*/evalconfig.yaml")
)
ENV = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-test", "ENGINE_URL": "http://127.0.0.1:9", "ENGINE_KEY": "k"}


def test_the_shipped_schema_is_the_one_the_records_write() -> None:
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))
    assert shipped == config_schema()
    assert shipped["properties"] == object_schema(EvalConfig)["properties"]
    assert list(shipped["properties"]) == [("assert" if f.name == "asserts" else f.name) for f in fields(EvalConfig)]
    printed = CliRunner().invoke(main, ["schema"])
    assert printed.exit_code == 0
    assert json.loads(printed.stdout) == shipped


def _carried(written: Any, typed: Any, where: str) -> None:
    """Every key and value written in the config is on the records, under the same name (``assert``/``not`` under their field)."""
    if is_dataclass(typed) and not isinstance(typed, type):
        assert isinstance(written, Mapping), where
        by_key = {("assert" if f.name == "asserts" else "not" if f.name == "not_" else f.name): f.name for f in fields(typed)}
        rest = getattr(typed, "params", None) if "params" in by_key.values() else None
        for key, value in written.items():
            if key in by_key:
                _carried(value, getattr(typed, by_key[key]), f"{where}.{key}")
            else:
                assert rest is not None and key in rest, f"{where}.{key} is on no record field"
                assert rest[key] == value, f"{where}.{key}"
    elif isinstance(typed, tuple):
        assert isinstance(written, list) and len(written) == len(typed), where
        for i, (w, t) in enumerate(zip(written, typed, strict=True)):
            _carried(w, t, f"{where}[{i}]")
    elif isinstance(typed, Mapping) and any(is_dataclass(v) for v in typed.values()):
        assert set(written) == set(typed), where
        for key in written:
            _carried(written[key], typed[key], f"{where}.{key}")
    else:
        assert _plain(typed) == written, where


def _plain(value: Any) -> Any:
    """A record field's value as YAML reads it (a tuple is a list)."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.parent.name if p.name == "evalconfig.yaml" else p.stem)
def test_every_valid_config_becomes_records_that_carry_every_key(path: Path) -> None:
    config = load_config(path, env=ENV, check_imports=False)
    typed = config.typed
    assert isinstance(typed, EvalConfig)
    _carried(config.data, typed, "config")
    assert config.typed is typed  # built once


def test_each_target_kind_becomes_its_record_and_defaults_fill_the_rest(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text("def answer(text):\n    return text\n")
    cfg = tmp_path / "evalconfig.yaml"
    cfg.write_text(
        "targets:\n"
        "  - {id: py, type: python, callable: 'agent.py:answer', ray: {actors: 2}}\n"
        "  - {id: eng, type: engine, url: 'http://127.0.0.1:9', pricing: {input_per_mtok: 1, output_per_mtok: 2}}\n"
        "  - {id: llm, type: provider, provider: openai, model: gpt-4o-mini, rate_limit: {rpm: 60}}\n"
        "datasets: [{id: d, cases: [{id: c, input: hi}]}]\n"
        "assert: [{type: contains, value: hi, not: true}]\n"
        "judge: {target: llm, samples: 3}\n"
        "gates: {max_cost_increase: {ratio: 0.2}, targets: {py: {no_new_failures: false}}}\n"
    )
    typed = load_config(cfg, env=ENV).typed
    py, eng, llm = typed.targets
    assert isinstance(py, PythonTargetSpec) and py.ray is not None and py.ray.actors == 2
    assert isinstance(eng, EngineTargetSpec) and eng.pricing is not None and eng.pricing.output_per_mtok == 2
    assert isinstance(llm, ProviderTargetSpec) and llm.rate_limit is not None and llm.rate_limit.rpm == 60
    assert typed.target("llm") is llm
    assert typed.asserts[0].type == "contains" and typed.asserts[0].not_ is True and typed.asserts[0].params == {"value": "hi"}
    assert typed.judge == JudgeSettings(target="llm", samples=3) and typed.judge.pass_mark == 0.8
    assert isinstance(typed.gates.max_cost_increase, CostGate) and typed.gates.max_cost_increase.min_usd is None
    assert typed.gates.targets is not None and typed.gates.targets["py"].no_new_failures is False
    assert typed.defaults.repeat == 1 and typed.output.dir == "runs" and typed.datasets[0].extra == "error"


def test_an_inline_judge_target_and_a_matrix_variant_are_records_too() -> None:
    inline = judge_settings({"target": {"type": "provider", "provider": "openai", "model": "m"}, "threshold": 0.5})
    assert isinstance(inline.target, ProviderTargetSpec) and inline.target.id == "" and inline.pass_mark == 0.5
    variant = target_spec({"id": "llm[model=b]", "type": "provider", "provider": "openai", "model": "b", "params": {"t": 1}})
    assert isinstance(variant, ProviderTargetSpec) and variant.model == "b"
    assert target_spec(variant) is variant
    assert gates_spec(None) == Gates()


def test_a_plugins_parameter_types_join_the_schema_through_the_same_translation(fresh_registry: None) -> None:
    @evalx.assertion("evalx_test_typed_params")
    def typed_params(
        ctx: evalx.AssertionContext,
        *,
        mode: Literal["strict", "loose"] = "strict",
        words: list[str] | None = None,
        headers: dict[str, str] | None = None,
        limit: int,
    ) -> evalx.Verdict:
        return evalx.Verdict.ok()

    sub = config_schema()["$defs"]["assert_evalx_test_typed_params"]
    assert sub["properties"]["mode"] == schema_of(Literal["strict", "loose"]) == {"enum": ["strict", "loose"]}
    assert sub["properties"]["words"] == {"type": "array", "items": {"type": "string"}}
    assert sub["properties"]["headers"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert sub["required"] == ["type", "limit"]
    assert list(sub["properties"])[:5] == ["type", "name", "weight", "not", "description"]  # AssertionSpec's common keys
