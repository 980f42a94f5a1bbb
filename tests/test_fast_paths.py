"""The speed fast paths (issue 9) give exactly what the slow paths they skip would give."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import asdict
from typing import Any

from evalx.common.templates import render_value
from evalx.datasets.loader import _case_validator, _plainly_valid
from evalx.models import Case
from evalx.targets.definitions import _SLOW, _compile_expression, _fast_path, _plain

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
_KEYS = [
    "choices",
    "message",
    "content",
    "tool_calls",
    "usage",
    "prompt_tokens",
    "prompt_tokens_details",
    "cached_tokens",
    "function",
    "name",
    "x",
    "a",
    "b",
    "items",
]
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
    case = Case(
        id="a", input={"x": [1, {"y": 2}]}, tags=["t"], asserts=[{"type": "contains", "value": "4"}], metadata={"m": (1, 2)}, targets=["t1"]
    )
    expected = asdict(case)
    # a conversation's fields: only when set, so a one-shot case maps as before
    del expected["turns"], expected["tool_results"], expected["simulate"], expected["context"]
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
    keys = [
        "id",
        "input",
        "expected",
        "category",
        "tags",
        "vars",
        "assert",
        "threshold",
        "repeat",
        "targets",
        "system",
        "metadata",
        "question",
    ]
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


# -- the OpenAI request body without Jinja ------------------------------------------------


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 3 and roll < 0.25:
        return {rng.choice(["a", "model", "é", "k<>&"]) + str(i): _random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}
    if depth < 3 and roll < 0.4:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.45:
        return (1, "t")  # a tuple: tojson makes it a list
    return rng.choice([None, 0, -3, 2.5, True, False, "", "x", 'q"uote\\', "😀\u2028", "{{ not a template }}"])


def test_openai_body_fast_path_agrees_with_jinja() -> None:
    from evalx.targets.definitions import OPENAI_BODY, _compile_template, _openai_body, find_provider

    assert find_provider("openai", None).body == OPENAI_BODY  # the shipped body takes the fast path
    rng = random.Random(7)
    answered = 0
    for _ in range(2000):
        params_keys = rng.sample(["temperature", "max_tokens", "model", "messages", "tools", "response_format"], rng.randint(0, 3))
        scope: dict[str, Any] = {
            "model": rng.choice(["gpt-x", "m", 3]),
            "messages": [{"role": rng.choice(["user", "assistant"]), "content": _random_value(rng)} for _ in range(rng.randint(0, 3))],
            "system": rng.choice([None, "", "be brief", _random_value(rng)]),
            "params": {k: _random_value(rng) for k in params_keys},
            "tools": [{"name": f"t{i}", "parameters": _random_value(rng)} for i in range(rng.choice([0, 0, 1, 2]))],
            "json_mode": False,
        }
        if rng.random() < 0.05:
            scope["params"][1] = "a non-string key"  # Jinja renders invalid JSON: left to it
        fast = _openai_body(scope)
        try:
            slow: Any = json.loads(_compile_template(OPENAI_BODY).render(**scope))
        except ValueError:
            slow = "invalid"
        if fast is _SLOW:
            continue
        answered += 1
        assert json.dumps(fast, sort_keys=False) == json.dumps(slow, sort_keys=False), scope
    assert answered > 1500
    assert _openai_body({"model": "m", "messages": "not a list", "system": None, "params": {}, "tools": []}) is _SLOW
    assert _openai_body({"model": "m", "messages": []}) is _SLOW  # missing names: Jinja's StrictUndefined error


def test_openai_body_fast_path_raises_what_tojson_raises() -> None:
    import datetime

    import pytest

    from evalx.targets.definitions import OPENAI_BODY, _compile_template, _openai_body

    scope = {"model": "m", "messages": [], "system": None, "params": {"when": datetime.date(2026, 1, 1)}, "tools": []}
    with pytest.raises(TypeError) as fast:
        _openai_body(scope)
    with pytest.raises(TypeError) as slow:
        _compile_template(OPENAI_BODY).render(**scope)
    assert str(fast.value) == str(slow.value)


# -- assertion specs validated without jsonschema (distinct specs: issue 12) ----------------

_SPEC_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    7,
    0.5,
    1.0,
    -2.5,
    2,
    float("nan"),
    float("inf"),
    "",
    "x",
    "4",
    "ims",
    "q",
    "iz",
    [],
    ["a"],
    ["a", "b"],
    [1],
    ["a", 2],
    [None],
    ["subset"],
    ["same", "disagrees"],
    ["bogus"],
    {},
    {"a": 1},
    {"model": "m"},
    "output",
    "total",
    "input",
    "nope",
]


def _random_spec(rng: random.Random, kind: str, keys: list[str]) -> dict[Any, Any]:
    spec: dict[Any, Any] = {"type": kind}
    for key in rng.sample(keys, rng.randint(0, min(4, len(keys)))):
        spec[key] = rng.choice(_SPEC_VALUES)
    if rng.random() < 0.05:
        spec[rng.choice(["valu", "extra", 3])] = "x"  # an unknown key
    if rng.random() < 0.03:
        del spec["type"]
    return spec


def test_plainly_valid_assertion_specs_are_valid_for_every_type() -> None:
    from evalx.assertions import registered
    from evalx.assertions.plain import plainly_valid
    from evalx.datasets.loader import _assertion_validator

    rng = random.Random(12)
    fast: dict[str, int] = {}
    for name, atype in registered().items():
        schema = atype.schema()
        validator = _assertion_validator(name, schema)
        keys = [k for k in schema["properties"] if k != "type"]
        for _ in range(1500):
            spec = _random_spec(rng, name, keys)
            if plainly_valid(atype, spec):
                fast[name] = fast.get(name, 0) + 1
                assert not list(validator.iter_errors(spec)), (name, spec)
    assert set(fast) == set(registered())  # every type has specs the fast path answers
    assert plainly_valid(registered()["contains"], {"type": "contains", "value": "Reference: case 12."})
    assert plainly_valid(registered()["regex"], {"type": "regex", "value": "a+", "flags": "im", "weight": 2, "not": True})
    assert not plainly_valid(registered()["regex"], {"type": "regex", "value": "a+", "flags": "z"})
    assert not plainly_valid(registered()["max_tokens"], {"type": "max_tokens", "value": 1.0})  # an integer? jsonschema decides
    assert not plainly_valid(registered()["llm_judge"], {"type": "llm_judge", "rubric": "r", "judge": {"model": "m"}})  # a $ref


_SCHEMA_LEAVES: list[Any] = [
    {},
    True,
    False,
    {"type": "string"},
    {"type": "number"},
    {"type": "integer"},
    {"type": "boolean"},
    {"type": "null"},
    {"type": "object"},
    {"type": "array"},
    {"type": ["string", "null"]},
    {"const": "a"},
    {"const": 1},
    {"enum": ["a", "b", 1, None, True]},
    {"minimum": 0},
    {"maximum": 1},
    {"exclusiveMinimum": 0},
    {"exclusiveMaximum": 2},
    {"minLength": 1},
    {"maxLength": 2},
    {"minItems": 1},
    {"maxItems": 1},
    {"pattern": "^a"},
    {"required": ["a"]},
    {"type": "number", "minimum": 0, "maximum": 1, "description": "d"},
    {"format": "email"},
    {"$ref": "#/$defs/x"},
    {"not": {"type": "string"}},
    {"oneOf": [{"type": "string"}]},
]


def _random_schema(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 3 and roll < 0.15:
        return {"anyOf": [_random_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    if depth < 3 and roll < 0.22:
        return {"allOf": [_random_schema(rng, depth + 1) for _ in range(rng.randint(1, 2))]}
    if depth < 3 and roll < 0.32:
        return {"type": "array", "items": _random_schema(rng, depth + 1)}
    if depth < 3 and roll < 0.45:
        props = {k: _random_schema(rng, depth + 1) for k in rng.sample(["a", "b", "c"], rng.randint(0, 3))}
        out: dict[str, Any] = {"type": "object", "properties": props}
        if rng.random() < 0.7:
            out["additionalProperties"] = rng.choice([False, True, {"type": "string"}])
        if props and rng.random() < 0.5:
            out["required"] = rng.sample(sorted(props), 1)
        return out
    return rng.choice(_SCHEMA_LEAVES)


def _random_instance(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 3 and roll < 0.2:
        return {k: _random_instance(rng, depth + 1) for k in rng.sample(["a", "b", "c", "d"], rng.randint(0, 3))}
    if depth < 3 and roll < 0.35:
        return [_random_instance(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice(_SPEC_VALUES)


def test_compiled_schemas_never_accept_what_jsonschema_rejects() -> None:
    from jsonschema import Draft202012Validator

    from evalx.assertions.plain import compile_schema

    rng = random.Random(13)
    accepted = 0
    for _ in range(3000):
        schema = _random_schema(rng)
        check = compile_schema(schema)
        validator = Draft202012Validator(schema if not isinstance(schema, dict) else {**schema, "$defs": {"x": {}}})
        for _ in range(10):
            value = _random_instance(rng)
            if check(value):
                accepted += 1
                assert validator.is_valid(value), (schema, value)
    assert accepted > 5000


def test_datasets_load_alike_with_and_without_the_spec_fast_path(tmp_path: Any, monkeypatch: Any) -> None:
    """Distinct specs, valid and not: the same cases, or the same file:line errors, either way."""
    import evalx.datasets.loader as loader
    from evalx.errors import DatasetError

    rng = random.Random(14)
    kinds = ["contains", "icontains", "regex", "max_tokens", "numeric_close", "llm_judge", "tool_order", "nope"]
    for round_ in range(40):
        lines = []
        for i in range(30):
            kind = rng.choice(kinds)
            spec = _random_spec(
                rng, kind, ["value", "values", "flags", "count", "tolerance", "threshold", "tools", "exact", "weight", "not", "name"]
            )
            if rng.random() < 0.6:  # mostly plain: a distinct contains value per case
                spec = {"type": "contains", "value": f"Reference: case {i}."}
            lines.append(json.dumps({"id": f"c{i}", "input": "q", "assert": [spec]}))
        path = tmp_path / f"cases{round_}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")

        def load(path: Any = path) -> Any:
            loader._valid_specs.clear()
            try:
                return [c.to_dict() for c in loader.load_dataset({"id": "d", "path": path.name}, base_dir=tmp_path)]
            except DatasetError as exc:
                return str(exc)

        fast = load()
        with monkeypatch.context() as m:
            m.setattr(loader, "plainly_valid", lambda atype, spec: False)
            slow = load()
        assert fast == slow


def test_plan_fingerprint_is_what_it_was(tmp_path: Any) -> None:
    """Version 1 of run.json's digest must not change (a run an older evalx started still resumes)."""
    import hashlib

    from evalx.config.loader import load_config
    from evalx.execution.plan import Selection, build_plan
    from evalx.execution.resume import plan_fingerprint
    from evalx.models import Case

    # the fields a case had then (turns, tool_results, simulate and context came later, and stay out of the digest while unset)
    case_fields = [f for f in Case.__dataclass_fields__ if f not in ("source", "turns", "tool_results", "simulate", "context")]

    def reference(config: Any, plan: Any) -> str:  # the implementation before issue 12
        h = hashlib.sha256()

        def feed(value: Any) -> None:
            h.update(json.dumps(value, sort_keys=True, default=str, ensure_ascii=False).encode())
            h.update(b"\x1e")

        redact = config.redactor.obj if config.redactor else (lambda value: value)
        feed(redact(plan.target_specs))
        feed(redact(config.global_asserts))
        feed(redact(config.data.get("judge")))
        for cell in plan.cells:  # (the cells' cases are made as they are read: a digest each, not one a case by id())
            fields = {f: getattr(cell.case, f) for f in case_fields}
            text = json.dumps(redact(fields), sort_keys=True, default=str, ensure_ascii=False)
            feed([cell.index, cell.key, hashlib.sha256(text.encode()).hexdigest()])
        return h.hexdigest()[:32]

    (tmp_path / "bot.py").write_text("def answer(q):\n    return q\n")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\nname: fp\ndefaults: {repeat: 2}\nassert: [{type: completed}]\n"
        "targets: [{id: a, type: python, callable: bot.py:answer}, {id: b, type: python, callable: bot.py:answer}]\n"
        "datasets:\n  - id: d\n    cases:\n"
        "      - {id: c1, input: 'héllo 😀', tags: [z, a], vars: {b: 1, a: [1.5, null]}, assert: [{type: contains, value: h}]}\n"
        "      - {id: 2, input: {q: x, a: {d: 1, c: 2}}, expected: 4, metadata: {k: v}, threshold: 0.5}\n",
        encoding="utf-8",
    )
    config = load_config(tmp_path / "evalconfig.yaml")
    plan = build_plan(config, Selection())
    assert len(plan.cells) == 8
    assert plan_fingerprint(config, plan, version=1) == reference(config, plan)
    assert plan_fingerprint(config, plan) != reference(config, plan)  # a new run records version 2


# -- junit.xml and report.html from one read of results.jsonl ---------------------------------


def test_reports_from_one_read_are_the_reports_written_one_by_one(tmp_path: Any) -> None:
    """In matrix order, shuffled (a killed run), repeats, a case split apart: byte for byte what write_junit/write_html write."""
    from evalx.reports.html import write_html
    from evalx.reports.junit import write_junit
    from evalx.reports.render import write_reports
    from evalx.results.summary import SummaryBuilder

    def result(i: int, case: int, repeat: int = 0) -> dict[str, Any]:
        return {
            "version": 1, "run_id": "20261126-101500-abcdef", "index": i, "target": f"t{case % 2}", "target_type": "python",
            "dataset": "d", "case_id": f"case-{case}", "repeat": repeat, "category": f"k{case % 3}", "status": "pass" if i % 4 else "fail",
            "score": 1.0, "latency_ms": 10.5 + i % 7, "output": {"text": f"answer {i} <&>"}, "error": None,
            "assertions": [{"type": "contains", "name": None, "passed": bool(i % 4), "score": 1.0, "reason": "r", "weight": 1.0}],
        }  # fmt: skip

    in_order = [result(i, i // 2, i % 2) for i in range(40)]
    shuffled = in_order[:]
    random.Random(15).shuffle(shuffled)
    split = in_order[:10] + [result(40, 1, 2)] + in_order[10:]  # case-1 comes back later: cases not contiguous
    indexes_only = [dict(r, case_id=f"c{r['index']}") for r in in_order[::-1]]  # contiguous cases, indexes going down
    for name, results in (("in-order", in_order), ("shuffled", shuffled), ("split", split), ("reversed", indexes_only)):
        builder = SummaryBuilder("20261126-101500-abcdef", "n", "2026-11-26T10:15:00+00:00", repeat_pass_rule="majority")
        for r in results:
            builder.add(r)  # type: ignore[arg-type]
        summary = builder.finish("2026-11-26T10:16:00+00:00", 1.0)
        together, alone = tmp_path / name / "together", tmp_path / name / "alone"
        for d in (together, alone):
            d.mkdir(parents=True)
            (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results), encoding="utf-8")
        write_reports(together, summary)
        write_junit(alone / "results.jsonl", alone / "junit.xml", name="n", run_id="20261126-101500-abcdef", repeat_pass_rule="majority")
        write_html(alone / "results.jsonl", summary, alone / "report.html")
        for report in ("junit.xml", "report.html"):
            assert (together / report).read_bytes() == (alone / report).read_bytes(), (name, report)


# -- the request body encoded once; one timer per cell; no header dict per response -------------


def _keyed_value(rng: random.Random, depth: int = 0) -> Any:
    """A JSON-able value whose dicts may have keys that collide once they are strings (1 and "1", True and "true")."""
    roll = rng.random()
    if depth < 3 and roll < 0.3:
        keys = rng.sample(["a", "1", 1, "true", True, "null", None, 2.5, "2.5", "é"], rng.randint(0, 4))
        return {k: _keyed_value(rng, depth + 1) for k in keys}
    if depth < 3 and roll < 0.45:
        return [_keyed_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.5:
        return (1, "t")
    return rng.choice([None, 0, -3, 2.5, -0.0, 1e300, float("nan"), True, "", "x", 'q"uote\\', "😀\u2028", "\ud800"])


def test_openai_request_bytes_are_what_the_http_client_would_send() -> None:
    from evalx.targets.definitions import _openai_request
    from evalx.targets.transport.http import HttpClient

    rng = random.Random(12)
    sent = skipped = 0
    for _ in range(3000):
        scope: dict[str, Any] = {
            "model": "m",
            "messages": [{"role": "user", "content": _keyed_value(rng)} for _ in range(rng.randint(0, 2))],
            "system": rng.choice([None, "be brief", _keyed_value(rng)]),
            "params": {k: _keyed_value(rng) for k in rng.sample(["temperature", "stop", "model", "x"], rng.randint(0, 2))},
            "tools": [{"name": "t", "parameters": _keyed_value(rng)}] if rng.random() < 0.3 else [],
        }
        found = _openai_request(scope)
        assert found is not _SLOW
        body, data = found
        try:
            expected = HttpClient._encode(body, None)[0]  # what the client sends for the body when given no bytes
        except UnicodeEncodeError:
            expected = None  # the client raises it where it did before: no bytes were made
        if data is None:
            skipped += 1
        else:
            sent += 1
            assert data == expected, scope
    assert sent > 1000 and skipped > 500  # both ways are taken


def test_a_provider_sends_exactly_the_json_of_the_body_it_records(tmp_path: Any) -> None:
    from pathlib import Path

    from aiohttp import web

    from evalx.common.deadline import Deadline, within
    from evalx.models import Case, Cell
    from evalx.targets.base import RunContext
    from evalx.targets.provider import ProviderTarget
    from evalx.targets.settings import TargetSettings

    received: list[bytes] = []
    answer = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}

    async def chat(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.json_response(answer)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        spec = {
            "id": "m",
            "type": "provider",
            "provider": "openai",
            "model": "x",
            "base_url": f"http://127.0.0.1:{port}/v1",
            "params": {"temperature": 0.5},
        }
        target = ProviderTarget(spec, TargetSettings(concurrency=4, timeout_s=30, retries=0))
        run = RunContext(run_id="r", config_dir=Path(tmp_path))
        await target.start(run)
        inputs: list[Any] = ["plain", "é 😀\u2028", {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}, {"n": 1}]
        inputs.append({"messages": [{"role": "user", "content": {1: "a", "1": "b"}}]})  # keys that collide: the client encodes
        try:
            for i, value in enumerate(inputs):
                traj = await within(
                    Deadline(30), target.invoke(Cell(index=i, target="m", dataset="d", case=Case(id=f"c{i}", input=value)), run)
                )
                assert traj.request is not None
                assert received[-1] == json.dumps(traj.request["body"], ensure_ascii=False).encode("utf-8"), value
        finally:
            await target.aclose()
            await runner.cleanup()

    asyncio.run(main())
    assert len(received) == 5


def test_a_response_scope_has_headers_only_for_a_definition_that_reads_them(tmp_path: Any) -> None:
    from evalx.targets.definitions import find_provider, load_definition
    from evalx.targets.transport.http import HttpResponse

    for name in ("openai", "anthropic", "ollama"):
        assert find_provider(name).reads_headers is False
    path = tmp_path / "hdr.yaml"
    path.write_text(
        "request: {path: /x, body: '{}'}\nresponse:\n  text: response.text\n  stop_reason: \"headers['X-Stop'] or none\"\n",
        encoding="utf-8",
    )
    definition = load_definition(path)
    assert definition.reads_headers is True
    from evalx.targets.provider import ProviderTarget
    from evalx.targets.settings import TargetSettings

    target = ProviderTarget({"id": "t", "provider": "hdr", "model": "m"}, TargetSettings())
    target.definition = definition
    resp = HttpResponse(200, {"X-Stop": "end"}, '{"text": "hi"}', {"text": "hi"})
    traj = target._trajectory(resp.json, resp)
    assert traj.text == "hi" and traj.raw is not None and traj.raw["stop_reason"] == "end"


def _typed(value: Any) -> Any:
    """``value`` with each scalar's type beside it (so 1 == 1.0 == True do not compare equal), NaN comparable."""
    if isinstance(value, dict):
        return ("dict", [(type(k).__name__, k, _typed(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_typed(v) for v in value])
    if isinstance(value, float) and value != value:
        return ("float", "nan")
    return (type(value).__name__, value)


def _containers(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [id(value)] + [i for v in value.values() for i in _containers(v)]
    if isinstance(value, (list, tuple)):
        return [id(value)] + [i for v in value for i in _containers(v)]
    return []


def test_the_plain_json_copy_is_the_json_round_trip() -> None:
    from evalx.targets.definitions import _json_copy

    class Str(str):
        pass

    rng = random.Random(21)
    copied = 0
    for _ in range(4000):
        value = _keyed_value(rng) if rng.random() < 0.5 else {"m": [_random_value(rng)], "k": _random_value(rng)}
        if rng.random() < 0.05:
            value = {"s": Str("a subclass")}
        if rng.random() < 0.05:
            value = [{"big": 10**30, "neg": -0.0, "inf": float("inf"), "t": True, "n": None}]
        try:
            expected = json.loads(json.dumps(value, ensure_ascii=False))
        except (TypeError, ValueError):
            continue
        copy = _json_copy(value)
        if copy is _SLOW:
            continue
        copied += 1
        assert _typed(copy) == _typed(expected), value
        assert not set(_containers(copy)) & set(_containers(value)), value  # a deep copy: nothing shared with the case
    assert copied > 1000


def _answer(rng: random.Random, provider: str) -> Any:
    """A random answer in the provider's shape: fields left out, of the wrong type, or odd (bools, floats, strings)."""

    def maybe(value: Any) -> Any:
        return rng.choice([value, value, value, None, "7", 2.5, True, -3, [], {}])

    def count() -> Any:
        return rng.choice([0, 5, 12, -3, None, 2.5, True, "9", "x", []])

    call = {
        "id": maybe("call_1"),
        "function": maybe({"name": maybe("lookup"), "arguments": maybe('{"q": 1}')}),
        "name": maybe("t"),
        "input": {"q": 2},
    }
    if provider == "anthropic":
        answer: dict[str, Any] = {
            "content": maybe([{"type": "text", "text": maybe("hi")}, {"type": "tool_use", **call}]),
            "usage": maybe({"input_tokens": count(), "output_tokens": count(), "cache_read_input_tokens": count()}),
            "stop_reason": maybe("end_turn"),
        }
    elif provider == "ollama":
        answer = {
            "message": maybe({"content": maybe("hi"), "tool_calls": maybe([call])}),
            "prompt_eval_count": count(),
            "eval_count": count(),
            "done_reason": maybe("stop"),
        }
    else:
        answer = {
            "choices": maybe([{"message": maybe({"content": maybe("hi"), "tool_calls": maybe([call])}), "finish_reason": maybe("stop")}]),
            "usage": maybe(
                {"prompt_tokens": count(), "completion_tokens": count(), "prompt_tokens_details": maybe({"cached_tokens": count()})}
            ),
        }
    for key in list(answer):
        if rng.random() < 0.1:
            del answer[key]
    return answer


def test_a_trajectory_read_by_the_fast_readers_is_the_one_jinja_reads(monkeypatch: Any) -> None:
    from evalx.errors import TargetProtocolError
    from evalx.models import token_count
    from evalx.targets import definitions
    from evalx.targets.definitions import DefinitionError, find_provider
    from evalx.targets.provider import ProviderTarget
    from evalx.targets.settings import TargetSettings
    from evalx.targets.transport.http import HttpResponse

    def outcome(target: ProviderTarget, answer: Any) -> Any:
        resp = HttpResponse(200, {}, json.dumps(answer), answer)
        try:
            return _typed(target._trajectory(answer, resp).to_dict())
        except (DefinitionError, TargetProtocolError) as exc:
            return str(exc)

    class Reference(ProviderTarget):
        """Token counts read as before the fast readers: evaluate(), then token_count(value)."""

        def _tokens(self, scope: dict[str, Any], key: str, read: Any) -> int | None:
            d = self.definition
            assert d is not None
            if key not in (d.response.get("usage") or {}):
                return None
            value = d.evaluate(("response", "usage", key), scope)
            if value is None:
                return None
            try:
                return token_count(value)
            except ValueError as exc:
                raise DefinitionError(f"{d.where('response', 'usage', key)}: {exc}") from None

    rng = random.Random(44)
    for provider in ("openai", "anthropic", "ollama"):
        fast = ProviderTarget({"id": "t", "provider": provider, "model": "m"}, TargetSettings())
        fast.definition = find_provider(provider)
        with monkeypatch.context() as m:
            m.setattr(definitions, "_fast_path", lambda source, slow=None: None)  # every expression through Jinja
            slow = Reference({"id": "t", "provider": provider, "model": "m"}, TargetSettings())
            slow.definition = find_provider(provider)
            slow._make_readers(slow.definition)
            for path in (
                ("response", "tool_calls", "items"),
                ("response", "tool_calls", "name"),
                ("response", "tool_calls", "args"),
                ("response", "tool_calls", "id"),
            ):
                slow.definition.reader(path)
        for _ in range(700):
            answer = _answer(rng, provider)
            assert outcome(fast, answer) == outcome(slow, answer), (provider, answer)
    openai = find_provider("openai").response
    assert all(definitions._fast_path(source) is not None for source in (openai["text"], openai["stop_reason"], *openai["usage"].values()))


# -- report writing: embed_json, clean_text, numbers, spool batching (issue 12's report time) -------------

# characters every escaping and cleaning rule looks at: controls, ESC sequences, CR, DEL, C1, surrogates,
# the script-unsafe five, separators, format characters, non-BMP
_TEXT_BITS = ["a", " ", "\n", "\t", "\r", "\r\n", "\x00", "\x07", "\x1b[1;31m", "\x1b]8;;x\x07", "\x1bZ", "\x1b", "\x7f", "\x85", "\x9f",
              "\ud800", "\udfff", "<", ">", "&", "</script>", "\u2028", "\u2029", "\u00a0", "\u200b", "é", "😀", '"', "\\", "\ue000"]  # fmt: skip


def _random_text(rng: random.Random, *, surrogates: bool = True) -> str:
    bits = _TEXT_BITS if surrogates else [b for b in _TEXT_BITS if not "\ud800" <= b[0] <= "\udfff"]
    return "".join(rng.choice(bits) for _ in range(rng.randint(0, 8)))


def _report_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 3 and roll < 0.25:
        return {_random_text(rng) if rng.random() < 0.3 else f"k{i}": _report_value(rng, depth + 1) for i in range(rng.randint(0, 3))}
    if depth < 3 and roll < 0.4:
        return [_report_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.7:
        return _random_text(rng)
    return rng.choice([None, 0, -3, 2.5, -0.0, 10**30, 1e-7, True, False, (1, "t"), {1: "k"}, b"x", float("nan"), float("inf")])


def _outcome_of(function: Any, value: Any) -> Any:
    try:
        return function(value)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        return (type(exc), str(exc))


def test_report_numbers_fast_path_is_the_isinstance_test() -> None:
    import math

    from evalx.results.figures import finite

    def reference(value: Any) -> float | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value) if math.isfinite(value) else None

    class Floaty(float):
        pass

    class Inty(int):
        pass

    values: list[Any] = [None, True, False, 0, -0.0, 0.0, 1, -7, 2**53 + 1, 10**308, 10**400, -(10**400), 1.5, float("nan"),
                         float("inf"), float("-inf"), Floaty(2.5), Floaty("nan"), Inty(3), "1", b"1", [1], {}, 1j]  # fmt: skip
    for function in (finite,):
        for value in values:
            got, expected = _outcome_of(function, value), _outcome_of(reference, value)
            assert got == expected or (got != got and expected != expected), (function, value)
            assert type(got) is type(expected), (function, value)


def _report_result(rng: random.Random, i: int, case: int) -> dict[str, Any]:
    """A results.jsonl line with every field the reports read, often odd.

    (No lone surrogate where summary.txt shows it: writing summary.txt fails on one, a separate matter.)
    """

    def shown() -> str:
        return _random_text(rng, surrogates=False)

    def number() -> Any:
        return rng.choice([None, 0, 12.5, -0.0, -3, 10**20, 1.23456789012, True, "7", 0.000123456789])

    output: Any = {
        "text": rng.choice([None, "", _random_text(rng), "The answer " * rng.randint(0, 50)]),
        "request": rng.choice([None, {}, _report_value(rng), {"method": "POST", "body": {"messages": [{"content": _random_text(rng)}]}}]),
        "tool_calls": rng.choice([None, [], [{"name": _random_text(rng), "args": _report_value(rng), "result": _report_value(rng)}, "x"]]),
        "usage": rng.choice([None, {"input_tokens": number(), "output_tokens": number(), "cache_hit_tokens": number()}]),
        "events": rng.choice([None, [], [_report_value(rng) for _ in range(3)]]),
        "events_truncated": rng.choice([False, True]),
        "latency_ms": number(), "ttft_ms": number(), "cost_usd": number(), "iterations": number(),
        "error": rng.choice([None, shown()]), "traceback": rng.choice([None, _random_text(rng)]),
    }  # fmt: skip
    return {
        "version": 1, "index": i, "target": rng.choice(["t0", "t<1>", "t\x1b2"]), "target_type": "provider", "dataset": "d",
        "case_id": f"case-{case}{shown() if case % 3 == 0 else ''}", "repeat": rng.choice([0, 0, 1, True, -1]),
        "category": rng.choice([None, "k", "k\r\n", shown()]), "difficulty": rng.choice([None, "hard", 3]),
        "tags": rng.choice([[], ["a", shown()], None]), "case_source": "cases.jsonl:1", "input": _report_value(rng),
        "expected": _report_value(rng), "status": rng.choice(["pass", "fail", "error", "skipped", "weird"]), "score": number(),
        "latency_ms": number(), "ttft_ms": number(), "cost_usd": number(), "judge_cost_usd": number(), "cached": rng.choice([False, True]),
        "assertions": [{"type": rng.choice(["contains", None, shown()]), "name": rng.choice([None, "n", shown()]),
                        "passed": rng.choice([True, False, None]), "score": number(), "reason": rng.choice([None, shown()]),
                        "details": rng.choice([None, {"k": _report_value(rng), "e": ""}]), "error": rng.choice([None, shown()])}
                       for _ in range(rng.randint(0, 3))] + ["not an assertion"],
        "output": output if rng.random() < 0.95 else "not an output",
        "error": rng.choice([None, shown()]), "traceback": None,
    }  # fmt: skip


def test_reports_with_the_fast_paths_are_the_reports_without_them(tmp_path: Any, monkeypatch: Any) -> None:
    """Random odd results: report.html and junit.xml written in small batches (spooled to files) are the bytes of one large batch."""
    from evalx.reports import html, junit
    from evalx.reports.render import write_reports
    from evalx.results.summary import SummaryBuilder

    rng = random.Random(43)
    lines = "".join(json.dumps(_report_result(rng, i, i // 2), default=str) + "\n" for i in range(300))
    results = [json.loads(line) for line in lines.splitlines()]
    builder = SummaryBuilder("20261126-101500-abcdef", "n", "2026-11-26T10:15:00+00:00")
    for r in results:
        builder.add(r)  # type: ignore[arg-type]
    summary = builder.finish("2026-11-26T10:16:00+00:00", 1.0)
    written: dict[str, tuple[bytes, bytes]] = {}
    for name in ("fast", "batched-small"):
        if name == "batched-small":  # a write to the spool per row, and the spools spilled to files
            for module in (html, junit):
                monkeypatch.setattr(module, "PENDING_CHARS", 1)
                monkeypatch.setattr(module, "SPOOL_BYTES", 1000)
        run_dir = tmp_path / name
        run_dir.mkdir()
        (run_dir / "results.jsonl").write_text(lines, encoding="utf-8")
        write_reports(run_dir, summary)
        written[name] = ((run_dir / "report.html").read_bytes(), (run_dir / "junit.xml").read_bytes())
    assert written["batched-small"] == written["fast"]
    assert b"\\u003c/script" in written["fast"][0] or b"script" not in written["fast"][0]


def test_a_cells_figures_are_what_the_loop_over_them_gave(tmp_path: Any) -> None:
    """_ReportData.add writes sc/ms/tt/usd/jusd/it one by one: the same values, rounding and key order as the loop it replaced."""
    from evalx.reports.html import _ReportData
    from evalx.results.figures import finite as _num

    def reference(result: dict[str, Any]) -> list[tuple[str, Any]]:
        output = result.get("output")
        output = output if isinstance(output, dict) else {}
        latency = _num(result.get("latency_ms"))
        latency = latency if latency is not None else _num(output.get("latency_ms"))
        figures = []
        for key, value in (
            ("sc", _num(result.get("score"))),
            ("ms", latency),
            ("tt", _num(result.get("ttft_ms")) if result.get("ttft_ms") is not None else _num(output.get("ttft_ms"))),
            ("usd", _num(result.get("cost_usd")) if result.get("cost_usd") is not None else _num(output.get("cost_usd"))),
            ("jusd", _num(result.get("judge_cost_usd"))),
            ("it", _num(output.get("iterations"))),
        ):
            if value is not None:
                figures.append((key, round(value, 8) if key in ("usd", "jusd") else round(value, 3)))
        return figures

    class Capture:
        rows: list[dict[str, Any]] = []
        count = 0

        def add(self, row: dict[str, Any]) -> None:
            self.rows.append(row)

    rng = random.Random(44)
    data = _ReportData([], spool_dir=tmp_path, index_cases=True)
    data.cells.close()
    data.cells = Capture()  # type: ignore[assignment]
    figure_keys = ("sc", "ms", "tt", "usd", "jusd", "it")
    for i in range(3000):
        result = json.loads(json.dumps(_report_result(rng, i, i), default=str))
        data.add(result)
        row = data.cells.rows[-1]  # type: ignore[attr-defined]
        got = [(k, v) for k, v in row.items() if k in figure_keys]
        assert got == reference(result)
        assert all(type(v) is type(e) for (_, v), (_, e) in zip(got, reference(result)))
    data.case_rows.close()


def _read_results_reference(path: Any, problems: Any) -> list[Any]:
    """read_results without its whole-line fast path: every line split at NULs, stripped, parsed."""
    seen: set[int] = set()
    out = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.endswith(b"\n"):
                pieces = [raw]
            elif b"\0" in raw:
                pieces = [p + b"\n" for p in raw[:-1].split(b"\0") if p.strip()]
            else:
                pieces = [raw]
            for piece in pieces:
                if not piece.strip():
                    continue
                try:
                    value = json.loads(piece) if piece.endswith(b"\n") else None
                except (ValueError, RecursionError):
                    value = None
                if not isinstance(value, dict):
                    if number not in problems.unreadable_lines[-1:]:
                        problems.unreadable_lines.append(number)
                    continue
                index = value.get("index")
                if type(index) is int:
                    if index in seen:
                        problems.duplicate_cells.append(index)
                        continue
                    seen.add(index)
                out.append(value)
    return out


def test_read_results_whole_line_fast_path_agrees_with_the_general_reader(tmp_path: Any) -> None:
    from evalx.results.store import ReadProblems, read_results

    rng = random.Random(13)
    lines = [
        lambda: json.dumps({"index": rng.randrange(30), "status": "pass", "t": "é\u2028"}).encode() + b"\n",
        lambda: json.dumps({"index": str(rng.randrange(3))}).encode() + b"\n",
        lambda: json.dumps({"status": "x"}).encode() + b"\n",
        lambda: json.dumps([1, 2]).encode() + b"\n",
        lambda: b"\n",
        lambda: b"   \n",
        lambda: b"{not json\n",
        lambda: b"[" * 3000 + b"\n",
        lambda: b"\0" * rng.randint(1, 5) + json.dumps({"index": rng.randrange(30)}).encode() + b"\n",
        lambda: json.dumps({"index": rng.randrange(30)}).encode() + b"\0\0" + json.dumps({"index": rng.randrange(30)}).encode() + b"\n",
        lambda: b' {"index": 7} \n',
    ]
    for trial in range(200):
        body = b"".join(rng.choice(lines)() for _ in range(rng.randint(0, 12)))
        if rng.random() < 0.3:
            body += json.dumps({"index": 99}).encode()[: rng.randint(1, 8)]  # torn last line
        path = tmp_path / f"r{trial}.jsonl"
        path.write_bytes(body)
        got_problems, want_problems = ReadProblems(), ReadProblems()
        assert list(read_results(path, got_problems)) == _read_results_reference(path, want_problems), body
        assert got_problems == want_problems, body
        assert list(read_results(path)) == _read_results_reference(path, ReadProblems())
