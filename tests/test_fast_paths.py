"""The speed fast paths (issue 9) give exactly what the slow paths they skip would give."""

from __future__ import annotations

import asyncio
import random
from dataclasses import asdict
from typing import Any

from evalx._datasets import _case_validator, _plainly_valid
from evalx._models import Case
from evalx._providers import _SLOW, _compile_expression, _fast_path, _plain
from evalx._templates import render_value

EXPRESSIONS = [
    'response.choices[0].message.content or ""',
    "response.choices[0].message.tool_calls or []",
    "response.usage.prompt_tokens",
    "response.usage.prompt_tokens_details.cached_tokens",
    "{{ response.content[0].text }}",
    "item.function.name",
    "response.x or none",
    "response.x or 0",
    "response.a[1].b or ''",
    "status",
    "missing.x",
]
_KEYS = ["choices", "message", "content", "tool_calls", "usage", "prompt_tokens", "prompt_tokens_details", "cached_tokens", "function", "name", "x", "a", "b", "items"]
_LEAVES: list[Any] = [None, 0, 1, "", "s", [], [1], {}, True, 2.5]


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 4 and roll < 0.45:
        return {k: _random_json(rng, depth + 1) for k in rng.sample(_KEYS, rng.randint(0, 4))}
    if depth < 4 and roll < 0.65:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice(_LEAVES)


def test_response_fast_path_agrees_with_jinja() -> None:
    rng = random.Random(9)
    answered = 0
    for _ in range(3000):
        scope = {"response": _random_json(rng), "status": rng.choice([200, 500]), "item": _random_json(rng, 1)}
        for expr in EXPRESSIONS:
            fast = _fast_path(expr)
            assert fast is not None, expr
            value = fast(scope)
            if value is _SLOW:
                continue
            answered += 1
            expected = _plain(_compile_expression(expr)(**scope))
            assert (_plain(value), type(_plain(value))) == (expected, type(expected)), (expr, scope)
    assert answered > 10_000  # the fast path really answers most of the time


def test_response_fast_path_leaves_the_unusual_to_jinja() -> None:
    assert _fast_path("response.items") is None  # a dict method's name: Jinja returns the method
    assert _fast_path("response.x | fromjson") is None
    assert _fast_path("response.error or response.message") is None
    assert _fast_path("response.__class__") is None
    assert _fast_path("response.text")({"response": "a string"}) is _SLOW  # type: ignore[misc]


def test_case_to_dict_is_asdict_and_a_deep_copy() -> None:
    case = Case(id="a", input={"x": [1, {"y": 2}]}, tags=["t"], asserts=[{"type": "contains", "value": "4"}], metadata={"m": (1, 2)}, targets=["t1"])
    expected = asdict(case)
    expected["assert"] = expected.pop("asserts")
    got = case.to_dict()
    assert got == expected and list(got) == list(expected)
    got["input"]["x"][1]["y"] = 3
    got["assert"][0]["value"] = "z"
    got["tags"].append("u")
    assert case.input == {"x": [1, {"y": 2}]} and case.asserts[0]["value"] == "4" and case.tags == ["t"]


def test_plainly_valid_cases_are_valid() -> None:
    rng = random.Random(3)
    values: list[Any] = ["", "x", 0, 1, 1.5, -1, True, None, [], ["a"], [1], {}, {"a": 1}, 2, 0.5, 1.0]
    keys = ["id", "input", "expected", "category", "tags", "vars", "assert", "threshold", "repeat", "targets", "system", "metadata", "question"]
    fast = 0
    for _ in range(20_000):
        data = {k: rng.choice(values) for k in rng.sample(keys, rng.randint(0, 5))}
        if rng.random() < 0.6:
            data["id"] = rng.choice(values)
        if rng.random() < 0.6:
            data["input"] = rng.choice(values)
        if _plainly_valid(data):
            fast += 1
            assert not list(_case_validator.iter_errors(data)), data
    assert fast > 100
    assert _plainly_valid({"id": "a", "input": "hi", "assert": [], "tags": ["x"], "threshold": 0.5})


def test_a_single_expression_template_keeps_its_type_on_every_call() -> None:
    for i in range(3):  # compiled once, evaluated per call
        assert render_value("{{ case.input }}", {"case": {"input": {"n": i}}}) == {"n": i}


def test_cell_timeout_still_fires_and_an_outer_cancel_still_cancels() -> None:
    from evalx._executor import _within

    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    async def main() -> None:
        try:
            await _within(slow(), 0.01)
        except asyncio.TimeoutError:
            pass
        else:
            raise AssertionError("no timeout")
        task = asyncio.ensure_future(_within(slow(), 10))
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return
        raise AssertionError("the cancel was swallowed")

    asyncio.run(main())
