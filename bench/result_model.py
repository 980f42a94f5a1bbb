"""Which representation for a cell result: TypedDict, dataclass(slots=True) or msgspec.Struct?

    python bench/result_model.py [-n 100000] [--repeats 5]

For each candidate, N times: build one provider-like cell result (27 keys, a
trajectory and two assertion records), serialise it to one ``results.jsonl``
line, read the line back into the representation, and read the fields the
summary reads. Each phase is timed on its own (best of ``--repeats``) and
printed in µs per result, with the bytes of one line, so the cost of each
choice on the hot path (10,000+ cells/s) is visible.

- ``typeddict``: a plain dict (what evalx writes today) + evalx's JSON encoder
  (stdlib ``json``) + ``json.loads``; the type exists for mypy only.
- ``dataclass``: ``@dataclass(slots=True)`` results and assertion records; a
  hand-written ``to_dict`` (never ``dataclasses.asdict``) for the encoder, and
  ``CellResult(**d)`` with its assertions rebuilt to read a line back.
- ``msgspec``: ``msgspec.Struct`` results and assertions; ``msgspec.json``
  encodes and decodes (decoding also validates the types).
- ``typeddict+msgspec-codec``: plain dicts through ``msgspec.json`` (no
  validation): separates what the codec buys from what the representation does.

Lines from the stdlib and msgspec encoders are compared: the typed choice
must keep ``results.jsonl`` readable by every existing reader.

A second table times what the executor does per cell: the result dict built
inline (as evalx did before the model) against the one constructor,
:func:`evalx.results.model.cell_result`, called with positional arguments.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import msgspec

from evalx.models import Case
from evalx.results.model import RESULT_VERSION, cell_result
from evalx.results.store import dumps  # evalx's one encoder for results.jsonl

RUN_ID = "20261126-101500-a1b2c3"
TEXT = "Your refund of order 4417 was approved; the money is back on your card within 5 days. " * 2


def _output(i: int) -> dict[str, Any]:
    return {
        "text": TEXT,
        "tool_calls": [],
        "usage": {"input_tokens": 120 + i % 7, "output_tokens": 40, "cache_hit_tokens": 0},
        "iterations": None,
        "events": [],
        "events_truncated": False,
        "latency_ms": 12.345,
        "ttft_ms": None,
        "cost_usd": 0.000123,
        "error": None,
        "request": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Where is my refund?"}]},
        "raw": None,
    }


def _assertion_dicts(i: int) -> list[dict[str, Any]]:
    return [
        {"type": "contains", "name": None, "passed": True, "score": 1.0, "reason": f"found 'refund {i}'", "weight": 1.0},
        {"type": "max_tokens", "name": "budget", "passed": True, "score": 1.0, "reason": "40 <= 500", "weight": 1.0},
    ]


# ---------------------------------------------------------------- TypedDict: a dict


def build_dict(i: int) -> dict[str, Any]:
    return {
        "version": 1, "run_id": RUN_ID, "index": i, "target": "mini", "target_type": "provider", "dataset": "golden",
        "case_id": f"case-{i}", "repeat": 0, "category": "billing", "difficulty": None, "tags": ["refund"],
        "case_source": "golden.jsonl:12", "input": "Where is my refund?", "expected": "refund", "status": "pass",
        "score": 1.0, "assertions": _assertion_dicts(i), "output": _output(i), "latency_ms": 12.345, "ttft_ms": None,
        "cost_usd": 0.000123, "judge_cost_usd": None, "cached": False, "error": None, "traceback": None,
        "started_at": "2026-11-26T10:15:00.123+00:00",
    }  # fmt: skip


def read_dict(r: dict[str, Any]) -> float:
    # what SummaryBuilder.add reads of a cell
    total = 0.0
    total += len(r["status"]) + len(r["target"]) + len(r["category"]) + r["index"] + r["repeat"]
    total += r["latency_ms"] or 0.0
    total += r["output"]["usage"]["input_tokens"]
    total += r["cost_usd"] or 0.0
    for a in r["assertions"]:
        total += a["score"]
    return total


# ---------------------------------------------------------------- dataclass(slots=True)


@dataclass(slots=True)
class DcAssertion:
    type: str
    name: str | None
    passed: bool | None
    score: float
    reason: str
    weight: float


@dataclass(slots=True)
class DcResult:
    version: int
    run_id: str
    index: int
    target: str
    target_type: str
    dataset: str
    case_id: str
    repeat: int
    category: str
    difficulty: str | None
    tags: list[str]
    case_source: str
    input: Any
    expected: Any
    status: str
    score: float | None
    assertions: list[DcAssertion]
    output: dict[str, Any]
    latency_ms: float | None
    ttft_ms: float | None
    cost_usd: float | None
    judge_cost_usd: float | None
    cached: bool
    error: str | None
    traceback: str | None
    started_at: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version, "run_id": self.run_id, "index": self.index, "target": self.target,
            "target_type": self.target_type, "dataset": self.dataset, "case_id": self.case_id, "repeat": self.repeat,
            "category": self.category, "difficulty": self.difficulty, "tags": self.tags, "case_source": self.case_source,
            "input": self.input, "expected": self.expected, "status": self.status, "score": self.score,
            "assertions": [
                {"type": a.type, "name": a.name, "passed": a.passed, "score": a.score, "reason": a.reason, "weight": a.weight}
                for a in self.assertions
            ],
            "output": self.output, "latency_ms": self.latency_ms, "ttft_ms": self.ttft_ms, "cost_usd": self.cost_usd,
            "judge_cost_usd": self.judge_cost_usd, "cached": self.cached, "error": self.error, "traceback": self.traceback,
            "started_at": self.started_at,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DcResult:
        d["assertions"] = [DcAssertion(**a) for a in d["assertions"]]
        return cls(**d)


def build_dc(i: int) -> DcResult:
    return DcResult(
        1, RUN_ID, i, "mini", "provider", "golden", f"case-{i}", 0, "billing", None, ["refund"], "golden.jsonl:12",
        "Where is my refund?", "refund", "pass", 1.0, [DcAssertion(**a) for a in _assertion_dicts(i)], _output(i),
        12.345, None, 0.000123, None, False, None, None, "2026-11-26T10:15:00.123+00:00",
    )  # fmt: skip


def read_typed(r: Any) -> float:
    total = 0.0
    total += len(r.status) + len(r.target) + len(r.category) + r.index + r.repeat
    total += r.latency_ms or 0.0
    total += r.output["usage"]["input_tokens"]
    total += r.cost_usd or 0.0
    for a in r.assertions:
        total += a.score
    return total


# ---------------------------------------------------------------- msgspec.Struct


class MsAssertion(msgspec.Struct):
    type: str
    name: str | None
    passed: bool | None
    score: float
    reason: str
    weight: float


class MsResult(msgspec.Struct):
    version: int
    run_id: str
    index: int
    target: str
    target_type: str
    dataset: str
    case_id: str
    repeat: int
    category: str
    difficulty: str | None
    tags: list[str]
    case_source: str
    input: Any
    expected: Any
    status: str
    score: float | None
    assertions: list[MsAssertion]
    output: dict[str, Any]
    latency_ms: float | None
    ttft_ms: float | None
    cost_usd: float | None
    judge_cost_usd: float | None
    cached: bool
    error: str | None
    traceback: str | None
    started_at: str | None


def build_ms(i: int) -> MsResult:
    return MsResult(
        1, RUN_ID, i, "mini", "provider", "golden", f"case-{i}", 0, "billing", None, ["refund"], "golden.jsonl:12",
        "Where is my refund?", "refund", "pass", 1.0, [MsAssertion(**a) for a in _assertion_dicts(i)], _output(i),
        12.345, None, 0.000123, None, False, None, None, "2026-11-26T10:15:00.123+00:00",
    )  # fmt: skip


_MS_ENCODER = msgspec.json.Encoder()
_MS_DECODER = msgspec.json.Decoder(MsResult)
_MS_ANY = msgspec.json.Decoder()


# ---------------------------------------------------------------- timing

Candidate = tuple[Callable[[int], Any], Callable[[Any], bytes], Callable[[bytes], Any], Callable[[Any], float]]

CANDIDATES: dict[str, Candidate] = {
    "typeddict": (build_dict, lambda r: (dumps(r) + "\n").encode(), json.loads, read_dict),
    "dataclass(slots)": (build_dc, lambda r: (dumps(r.to_dict()) + "\n").encode(), lambda b: DcResult.from_dict(json.loads(b)), read_typed),
    "msgspec.Struct": (build_ms, lambda r: _MS_ENCODER.encode(r) + b"\n", _MS_DECODER.decode, read_typed),
    "typeddict+msgspec-codec": (build_dict, lambda r: _MS_ENCODER.encode(r) + b"\n", _MS_ANY.decode, read_dict),
}


def _timed(fn: Callable[[], None]) -> float:
    gc.collect()
    gc.disable()  # as during a run (runner._quiet_collector): collections are not what is compared here
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    finally:
        gc.enable()


def measure_once(name: str, n: int) -> dict[str, float]:
    """One measurement of each phase for candidate ``name``, in µs per result."""
    build, encode, decode, read = CANDIDATES[name]
    built: list[Any] = []
    lines: list[bytes] = []
    decoded: list[Any] = []

    def phase_build() -> None:
        built[:] = [build(i) for i in range(n)]

    def phase_encode() -> None:
        lines[:] = [encode(r) for r in built]

    def phase_decode() -> None:
        decoded[:] = [decode(line) for line in lines]

    def phase_read() -> None:
        for r in decoded:
            read(r)

    figures = {phase: _timed(fn) * 1e6 / n for phase, fn in
               (("build", phase_build), ("encode", phase_encode), ("decode", phase_decode), ("read", phase_read))}  # fmt: skip
    figures["line_bytes"] = float(len(lines[0]))
    return figures


def measure(n: int, repeats: int) -> dict[str, dict[str, float]]:
    """Best of ``repeats`` per phase and candidate; candidates interleaved (rotated each round) so load spikes hit all."""
    names = list(CANDIDATES)
    best: dict[str, dict[str, float]] = {}
    for round_ in range(repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            figures = measure_once(name, n)
            kept = best.setdefault(name, figures)
            for key, value in figures.items():
                kept[key] = min(kept[key], value)
    for figures in best.values():
        figures["total"] = figures["build"] + figures["encode"] + figures["decode"] + figures["read"]
    return best


# ---------------------------------------------------------------- the executor's constructor

CASE = Case(id="case-1", input="Where is my refund?", dataset="golden", expected="refund", category="billing",
            tags=["refund"], source="golden.jsonl:12")  # fmt: skip


def inline(i: int) -> dict[str, Any]:
    """The result dict as the executor spelled it out before :func:`cell_result` (a 26-key literal)."""
    case, output, assertions = CASE, OUTPUT, ASSERTIONS
    score: float | None = 1.0
    return {
        "version": RESULT_VERSION, "run_id": RUN_ID, "index": i, "target": "mini", "target_type": "provider",
        "dataset": "golden", "case_id": case.id, "repeat": 0, "category": case.category, "difficulty": case.difficulty,
        "tags": case.tags, "case_source": case.source, "input": case.input, "expected": case.expected, "status": "pass",
        "score": None if score is None else round(score, 6), "assertions": assertions, "output": output,
        "latency_ms": 12.345, "ttft_ms": None, "cost_usd": 0.000123, "judge_cost_usd": None, "cached": False,
        "error": None, "traceback": None, "started_at": "2026-11-26T10:15:00.123+00:00",
    }  # fmt: skip


def constructor(i: int) -> Any:
    return cell_result(RUN_ID, i, "mini", "provider", CASE, "golden", 0, "pass", 1.0, ASSERTIONS, OUTPUT,  # type: ignore[arg-type]
                       12.345, None, 0.000123, None, False, None, None, "2026-11-26T10:15:00.123+00:00")  # fmt: skip


OUTPUT = _output(0)
ASSERTIONS = _assertion_dicts(0)


def measure_constructors(n: int, repeats: int) -> dict[str, float]:
    assert inline(3) == constructor(3) and list(inline(3)) == list(constructor(3))  # the same line
    best: dict[str, float] = {}
    for round_ in range(repeats):
        for name, fn in (("inline literal", inline), ("cell_result()", constructor))[:: 1 if round_ % 2 else -1]:
            seconds = _timed(lambda fn=fn: [fn(i) for i in range(n)] and None)  # type: ignore[misc]
            best[name] = min(best.get(name, seconds), seconds)
    return {name: seconds * 1e6 / n for name, seconds in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=100_000, help="results per measurement (default 100,000)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds; the best of them per phase (default 5)")
    args = parser.parse_args()

    same = (dumps(build_dict(7)) + "\n").encode() == _MS_ENCODER.encode(build_ms(7)) + b"\n"
    print(
        f"result model: {args.n:,} results, best of {args.repeats}, µs per result (Python {sys.version.split()[0]}, msgspec {msgspec.__version__})"
    )
    print(f"{'representation':<26}{'build':>8}{'encode':>8}{'decode':>8}{'read':>8}{'total':>8}{'vs typeddict':>14}{'line bytes':>12}")
    results = measure(args.n, args.repeats)
    base = results["typeddict"]["total"]
    for name, f in results.items():
        print(f"{name:<26}{f['build']:>8.2f}{f['encode']:>8.2f}{f['decode']:>8.2f}{f['read']:>8.2f}{f['total']:>8.2f}"
              f"{f['total'] / base:>13.2f}x{f['line_bytes']:>12.0f}")  # fmt: skip
    print(f"stdlib and msgspec lines byte-identical: {same}")
    print()
    print(f"the executor's constructor: µs per result, best of {args.repeats}")
    for name, micros in measure_constructors(args.n, args.repeats).items():
        print(f"{name:<26}{micros:>8.2f}")


if __name__ == "__main__":
    main()
