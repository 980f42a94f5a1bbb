"""The shipped price tables: every entry well-formed and reachable, and a run's cost computed from them."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from contract_server import Answer, ContractServer, run_cell

from evalx.targets.definitions import Price, available, find_provider

SHIPPED = sorted(name for name, entry in available().items() if entry.shipped)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_price_entry_is_well_formed_and_reachable(name: str) -> None:
    d = find_provider(name)
    for key, price in d.pricing.items():
        where = f"{d.where('pricing', key)}"
        for value in (price.input_per_mtok, price.output_per_mtok, price.cached_input_per_mtok):
            # USD per million tokens: a figure per thousand, or a typo, is out of this range
            assert value is None or (math.isfinite(value) and 0 <= value < 1000), where
        if price.cached_input_per_mtok is not None:
            assert price.cached_input_per_mtok <= price.input_per_mtok, f"{where}: a cache read costs more than input"
        assert key == key.strip() and key, where
        # no entry is shadowed: a name the key itself matches resolves to this entry, not a longer glob's
        sample = key.replace("*", "x").replace("?", "x")
        assert "[" in key or d.price(sample) is price, f"{where}: {sample!r} is priced by another entry"


def test_a_childs_price_table_replaces_the_inherited_one() -> None:
    xai, openai = find_provider("xai"), find_provider("openai")
    assert xai.extends == ("openai",) and xai.pricing and not set(xai.pricing) & set(openai.pricing)
    assert xai.price("gpt-4o") is None  # OpenAI's table does not price a model through xAI
    # a host that declares no table inherits none either
    assert find_provider("groq").pricing == {}
    # vertex-anthropic declares none: Anthropic's table, inherited, prices Vertex's model names
    assert find_provider("vertex-anthropic").price("claude-opus-4-6") == Price(5.0, 25.0, 0.5)


@pytest.fixture(scope="module")
def server() -> Iterator[ContractServer]:
    s = ContractServer().start()
    yield s
    s.stop()


def test_a_runs_cost_uses_the_table(server: ContractServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XAI_API_KEY", "xai-test-key-0123456789")
    monkeypatch.setenv("XAI_BASE_URL", server.url)
    usage = {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200, "prompt_tokens_details": {"cached_tokens": 400}}
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}], "usage": usage}
    server.script(Answer(body=answer))
    code, output, cell = run_cell(tmp_path, "xai", "grok-4-1-fast-reasoning")
    assert code == 0, output
    # grok-4-1-fast*: $0.20 input, $0.05 cached input, $0.50 output per million
    assert cell["cost_usd"] == pytest.approx((600 * 0.20 + 400 * 0.05 + 200 * 0.50) / 1e6)

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "Paris."}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 50},
    }
    server.script(Answer(body=message))
    code, output, cell = run_cell(tmp_path, "anthropic", "claude-opus-4-6")
    assert code == 0, output
    # claude-opus-4-6*, not the older claude-opus-4-*: $5 input, $0.50 cache read, $25 output per million
    assert cell["cost_usd"] == pytest.approx((100 * 5.00 + 50 * 0.50 + 20 * 25.00) / 1e6)
