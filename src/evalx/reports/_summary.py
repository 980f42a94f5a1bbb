"""A run's summary: built cell by cell from result dicts, rendered for people.

:class:`SummaryBuilder` reads results as they stream (from the executor or
``results.jsonl``) and keeps only counters and latencies, never the results
themselves, so a 100,000-cell run summarises in a few megabytes.
:func:`finish <SummaryBuilder.finish>` returns ``summary.json``'s content;
:func:`format_summary` turns it into the terminal / ``summary.txt`` text.
"""

from __future__ import annotations

import heapq
import math
import re
from array import array
from collections.abc import Iterable
from typing import Any

from tabulate import tabulate  # type: ignore[import-untyped,unused-ignore]  # no stubs shipped

from .. import _stats
from .._models import RESULT_VERSION, STATUSES

__all__ = ["SummaryBuilder", "format_summary"]

#: failing cells listed in summary.json (the first ones in matrix order)
MAX_FAILURES = 200
#: flaky cases listed in summary.json
MAX_FLAKY = 50
#: failing cells listed in the text summary
MAX_FAILURE_LINES = 30
#: width a failure line is clipped to in the text summary
LINE_WIDTH = 120

_Json = dict[str, Any]
_PACK = 1 << 32


def _number(value: Any) -> float | None:
    """A finite float, or None for None, bools, NaN and anything not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _either(result: dict[str, Any], output: dict[str, Any], key: str) -> float | None:
    """A figure from the result, else from its trajectory (older or partial lines)."""
    value = _number(result.get(key))
    return value if value is not None else _number(output.get(key))


def _tokens(value: Any) -> int:
    number = _number(value)
    return int(number) if number is not None and number > 0 else 0


class _Counts:
    """Cells by status for one group (a target, a category, a difficulty...)."""

    __slots__ = ("by_status", "first")

    def __init__(self) -> None:
        self.by_status = dict.fromkeys(STATUSES, 0)
        self.first = math.inf  # lowest matrix index seen: groups list in matrix order

    def add(self, status: str, order: float) -> None:
        self.by_status[status] += 1
        self.first = min(self.first, order)

    def as_dict(self) -> _Json:
        cells = sum(self.by_status.values())
        passed = self.by_status["pass"]
        # Pass rate rule: pass / (cells - skipped). A skipped cell was
        # inconclusive (nothing failed, something could not be decided, e.g. no
        # judge), so it is evidence neither way; errors count against the rate.
        decided = cells - self.by_status["skipped"]
        rate = passed / decided if decided else None
        ci = list(_stats.wilson_interval(passed, decided)) if decided else None
        return {"cells": cells, **self.by_status, "pass_rate": rate, "pass_rate_ci": ci}


class _Target(_Counts):
    """A target's counters, plus what is reported per target only."""

    __slots__ = ("cached", "cost", "cost_cells", "cost_missing", "judge_cells", "judge_cost", "latencies", "tokens", "ttfts")

    def __init__(self) -> None:
        super().__init__()
        self.latencies = array("d")  # 8 bytes a cell: the only per-cell memory kept
        self.ttfts = array("d")
        self.tokens = [0, 0, 0]  # input, output, cache hit
        self.cost = 0.0
        self.cost_cells = 0
        self.cost_missing = 0
        self.judge_cost = 0.0
        self.judge_cells = 0
        self.cached = 0


def _latency_stats(values: Iterable[float]) -> _Json:
    data = sorted(values)
    return {
        "p50": _stats.percentile(data, 50),
        "p95": _stats.percentile(data, 95),
        "p99": _stats.percentile(data, 99),
        "mean": _stats.mean(data),
    }


def _label(assertion: dict[str, Any]) -> str:
    kind = str(assertion.get("type") or "assertion")
    name = assertion.get("name")
    return f"{kind} ({name})" if name else kind


def _failure_reason(result: dict[str, Any], status: str) -> str:
    """The one line that says why a cell failed: its first failing assertion, or its error."""
    if status == "error":
        output = result.get("output")
        error = result.get("error") or (output.get("error") if isinstance(output, dict) else None)
        return str(error or "the target failed")
    for assertion in result.get("assertions") or []:
        if isinstance(assertion, dict) and assertion.get("passed") is False:
            reason = assertion.get("reason") or assertion.get("error")
            return f"{_label(assertion)}: {reason}" if reason else f"{_label(assertion)} did not hold"
    score = _number(result.get("score"))
    return f"score {score:.3f} is below the case threshold" if score is not None else "failed"


class SummaryBuilder:
    """Accumulates a run's summary one result dict at a time.

    Memory per cell is a latency (and a TTFT) as 8-byte floats; per case
    (target, dataset, case id) two counters, for pass@k and flakiness when a
    run has repeats. Everything else is a running total.
    """

    def __init__(self, run_id: str, name: str, started_at: str) -> None:
        self.run_id = run_id
        self.name = name
        self.started_at = started_at
        self._totals = _Counts()
        self._targets: dict[str, _Target] = {}
        self._categories: dict[str, _Counts] = {}
        self._difficulties: dict[str, _Counts] = {}
        # "target\x1fdataset\x1fcase_id" -> runs * _PACK + passes (decided runs only):
        # one int a case rather than a list, a third of the memory on big runs
        self._cases: dict[str, int] = {}
        self._max_repeat = 0
        self._inconclusive = 0
        # max-heap (negated order) of the first MAX_FAILURES failures in matrix order
        self._failures: list[tuple[float, int, _Json]] = []
        self._failures_total = 0
        self._seen = 0

    def add(self, result: dict[str, Any]) -> None:
        """Count one cell's result (a ``results.jsonl`` line, parsed)."""
        arrival = self._seen
        self._seen += 1
        status = result.get("status")
        if status not in STATUSES:
            status = "error"  # an unknown status must never read as a pass
        assert isinstance(status, str)
        index = result.get("index")
        order = float(index) if isinstance(index, int) and not isinstance(index, bool) else math.inf

        target_id = str(result.get("target") or "")
        category = str(result.get("category") or "general")
        difficulty = result.get("difficulty")

        self._totals.add(status, order)
        target = self._targets.get(target_id)
        if target is None:
            target = self._targets[target_id] = _Target()
        target.add(status, order)
        self._categories.setdefault(category, _Counts()).add(status, order)
        if difficulty is not None:
            self._difficulties.setdefault(str(difficulty), _Counts()).add(status, order)

        output = result.get("output")
        output = output if isinstance(output, dict) else {}

        latency = _either(result, output, "latency_ms")
        if latency is not None and latency >= 0:
            target.latencies.append(latency)
        ttft = _either(result, output, "ttft_ms")
        if ttft is not None and ttft >= 0:
            target.ttfts.append(ttft)

        usage = output.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        tokens_in = _tokens(usage.get("input_tokens"))
        tokens_out = _tokens(usage.get("output_tokens"))
        target.tokens[0] += tokens_in
        target.tokens[1] += tokens_out
        target.tokens[2] += _tokens(usage.get("cache_hit_tokens"))

        cost = _either(result, output, "cost_usd")
        if cost is not None:
            target.cost += cost
            target.cost_cells += 1
        elif tokens_in or tokens_out:  # it used a priced resource and we could not price it
            target.cost_missing += 1
        judge_cost = _number(result.get("judge_cost_usd"))
        if judge_cost is not None:
            target.judge_cost += judge_cost
            target.judge_cells += 1
        if result.get("cached"):
            target.cached += 1

        for assertion in result.get("assertions") or []:
            if isinstance(assertion, dict) and assertion.get("passed") is None:
                self._inconclusive += 1

        repeat = result.get("repeat")
        if isinstance(repeat, int) and repeat > self._max_repeat:
            self._max_repeat = repeat
        if status != "skipped":
            key = f"{target_id}\x1f{result.get('dataset') or ''}\x1f{result.get('case_id') or ''}"
            self._cases[key] = self._cases.get(key, 0) + _PACK + (status == "pass")

        if status in ("fail", "error"):
            self._failures_total += 1
            entry: _Json = {
                "target": target_id,
                "dataset": result.get("dataset"),
                "case_id": result.get("case_id"),
                "repeat": repeat,
                "category": result.get("category"),
                "status": status,
                "reason": _failure_reason(result, status),
            }
            heapq.heappush(self._failures, (-order, -arrival, entry))
            if len(self._failures) > MAX_FAILURES:
                heapq.heappop(self._failures)  # drops the latest in matrix order

    def _repeats(self, target_order: list[str]) -> _Json | None:
        """pass@k, pass^k and flaky cases, when the run repeated its cases."""
        if self._max_repeat == 0:
            return None
        per_case: dict[str, list[tuple[str, str, int, int]]] = {t: [] for t in target_order}
        for key, packed in self._cases.items():
            runs, passes = divmod(packed, _PACK)
            target_id, dataset, case_id = key.split("\x1f", 2)
            per_case[target_id].append((dataset, case_id, runs, passes))
        per_target: _Json = {}
        flaky: list[_Json] = []
        for target_id, cases in per_case.items():
            if not cases:
                continue
            # k is the repeat count every case reached, so each estimate is defined
            k = min(runs for _, _, runs, _ in cases)
            flaky_here = sorted((d, c, r, p) for d, c, r, p in cases if 0 < p < r)
            per_target[target_id] = {
                "cases": len(cases),
                "k": k,
                "pass_at_1": _stats.mean(p / r for _, _, r, p in cases),
                "pass_at_k": _stats.mean(_stats.pass_at_k(r, p, k) for _, _, r, p in cases),
                "pass_hat_k": _stats.mean(_stats.pass_hat_k(r, p, k) for _, _, r, p in cases),
                "flaky_cases": len(flaky_here),
            }
            flaky.extend({"target": target_id, "dataset": d, "case_id": c, "passed": p, "runs": r} for d, c, r, p in flaky_here)
        return {
            "runs_per_case": self._max_repeat + 1,
            "per_target": per_target,
            "flaky_cases": len(flaky),
            "flaky": flaky[:MAX_FLAKY],
        }

    def finish(self, finished_at: str, duration_s: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The summary as a JSON-ready dict, ``"version"`` first.

        ``extra`` (a baseline comparison, gate results...) is added at the top
        level; it may not replace a key the builder computed.
        """
        targets = sorted(self._targets, key=lambda t: self._targets[t].first)
        per_target: _Json = {}
        for target_id in targets:
            t = self._targets[target_id]
            per_target[target_id] = {
                **t.as_dict(),
                "latency_ms": _latency_stats(t.latencies),
                "ttft_ms": _latency_stats(t.ttfts),
                "tokens": {"input": t.tokens[0], "output": t.tokens[1], "cache_hit": t.tokens[2]},
                "cost_usd": t.cost if t.cost_cells else None,
                "cost_missing_cells": t.cost_missing,
                "judge_cost_usd": t.judge_cost if t.judge_cells else None,
                "cached_cells": t.cached,
            }

        groups = self._targets.values()
        cells = sum(self._totals.by_status.values())
        tokens_in = sum(t.tokens[0] for t in groups)
        tokens_cache = sum(t.tokens[2] for t in groups)
        cached = sum(t.cached for t in groups)

        def ordered(counts: dict[str, _Counts]) -> _Json:
            return {k: counts[k].as_dict() for k in sorted(counts, key=lambda k: counts[k].first)}

        failures = [entry for _, _, entry in sorted(self._failures, reverse=True)]
        summary: _Json = {
            "version": RESULT_VERSION,
            "run_id": self.run_id,
            "name": self.name,
            "started_at": self.started_at,
            "finished_at": finished_at,
            "duration_s": duration_s,
            "totals": self._totals.as_dict(),
            "per_target": per_target,
            "per_category": ordered(self._categories),
            "per_difficulty": ordered(self._difficulties),
            # overall percentiles from the per-target samples: no second copy kept while streaming
            "latency_ms": _latency_stats(v for t in groups for v in t.latencies),
            "ttft_ms": _latency_stats(v for t in groups for v in t.ttfts),
            "tokens": {"input": tokens_in, "output": sum(t.tokens[1] for t in groups), "cache_hit": tokens_cache},
            # prompt-cache tokens as a share of input tokens
            "cache_hit_ratio": tokens_cache / tokens_in if tokens_in else None,
            "cost_usd": sum(t.cost for t in groups) if any(t.cost_cells for t in groups) else None,
            "cost_missing_cells": sum(t.cost_missing for t in groups),
            "judge_cost_usd": sum(t.judge_cost for t in groups) if any(t.judge_cells for t in groups) else None,
            "cached_cells": cached,
            # cells answered from evalx's own response cache
            "response_cache_hit_ratio": cached / cells if cells else None,
            "inconclusive_assertions": self._inconclusive,
            "repeats": self._repeats(targets),
            "failures": failures,
            "failures_total": self._failures_total,
        }
        for key, value in (extra or {}).items():
            if key in summary:
                raise ValueError(f"summary extra key {key!r} would replace a computed field")
            summary[key] = value
        return summary


# ---------------------------------------------------------------- rendering

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_SGR = re.compile(r"\x1b\[[0-9;]*m")
_ANSI = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}


def _one_line(text: Any) -> str:
    """Untrusted text made safe for one terminal line: no escapes, no newlines."""

    def visible(match: re.Match[str]) -> str:
        char = match.group()
        return " " if char in "\n\r\t" else f"\\x{ord(char):02x}" if ord(char) <= 0xFF else f"\\u{ord(char):04x}"

    return " ".join(_CONTROL.sub(visible, str(text)).split())


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _pct(rate: float | None) -> str:
    return "—" if rate is None else f"{rate * 100:.1f}%"


def _ci(ci: list[float] | None) -> str:
    return "—" if not ci else f"{ci[0] * 100:.1f}–{ci[1] * 100:.1f}%"


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 10:
        return f"{value:.1f}ms"
    if value < 1000:
        return f"{value:.0f}ms"
    if value < 60_000:
        return f"{value / 1000:.2f}s"
    minutes, seconds = divmod(value / 1000, 60)
    return f"{minutes:.0f}m{seconds:04.1f}s"


def _duration(seconds: float | None) -> str:
    return "—" if seconds is None else _ms(seconds * 1000)


def _count(n: int) -> str:
    if n < 10_000:
        return f"{n:,}"
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def _usd(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:,.2f}" if value >= 100 else f"${value:.4f}"


def format_summary(summary: dict[str, Any], *, color: bool = False) -> str:
    """The text shown at the end of a run and stored as ``summary.txt``."""

    def paint(text: str, *styles: str) -> str:
        if not color or not styles:
            return text
        codes = ";".join(_ANSI[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def counts_row(c: _Json) -> list[str]:
        return [
            str(c["cells"]),
            paint(str(c["pass"]), "green") if c["pass"] else "0",
            paint(str(c["fail"]), "red") if c["fail"] else "0",
            paint(str(c["error"]), "red") if c["error"] else "0",
            paint(str(c["skipped"]), "yellow") if c["skipped"] else "0",
            _pct(c["pass_rate"]),
        ]

    def table(rows: list[list[str]], headers: list[str], numeric_from: int = 1) -> str:
        # "plain" with the header as a row, plus a rule sized to each column: tabulate's
        # header padding would otherwise add two blanks to every column
        widths = [max(len(_SGR.sub("", str(row[i]))) for row in [headers, *rows]) for i in range(len(headers))]
        rule = ["─" * w for w in widths]
        align = ["left"] * numeric_from + ["right"] * (len(headers) - numeric_from)
        return str(tabulate([headers, rule, *rows], tablefmt="plain", disable_numparse=True, colalign=align))

    totals = summary["totals"]
    lines = [
        paint(f"Run {summary['run_id']}", "bold") + (f"  {_one_line(summary['name'])}" if summary.get("name") else ""),
        f"{totals['cells']} cells: "
        + " · ".join(
            [
                paint(f"{totals['pass']} pass", "green"),
                paint(f"{totals['fail']} fail", "red") if totals["fail"] else "0 fail",
                paint(f"{totals['error']} error", "red") if totals["error"] else "0 error",
                paint(f"{totals['skipped']} skipped", "yellow") if totals["skipped"] else "0 skipped",
            ]
        ),
        f"Pass rate {paint(_pct(totals['pass_rate']), 'bold')}"
        + (f"  (95% CI {_ci(totals['pass_rate_ci'])})" if totals.get("pass_rate_ci") else "")
        + ("  skipped cells excluded" if totals["skipped"] else ""),
    ]

    per_target = summary.get("per_target") or {}
    if per_target:
        rows = []
        for target_id, t in per_target.items():
            tokens = t["tokens"]["input"] + t["tokens"]["output"]
            rows.append(
                [_one_line(target_id)]
                + counts_row(t)
                + [_ms(t["latency_ms"]["p50"]), _ms(t["latency_ms"]["p99"]), _count(tokens), _usd(t["cost_usd"])]
            )
        headers = ["target", "cells", "pass", "fail", "error", "skip", "pass rate", "p50", "p99", "tokens", "cost"]
        lines += ["", table(rows, headers)]

    for key, title in (("per_category", "category"), ("per_difficulty", "difficulty")):
        groups = summary.get(key) or {}
        if groups:
            rows = [[_one_line(name)] + counts_row(c) + [_ci(c["pass_rate_ci"])] for name, c in groups.items()]
            headers = [title, "cells", "pass", "fail", "error", "skip", "pass rate", "95% CI"]
            lines += ["", table(rows, headers)]

    repeats = summary.get("repeats")
    if repeats and repeats.get("per_target"):
        rows = [
            [
                _one_line(t),
                str(r["cases"]),
                str(r["k"]),
                _pct(r["pass_at_1"]),
                _pct(r["pass_at_k"]),
                _pct(r["pass_hat_k"]),
                str(r["flaky_cases"]),
            ]
            for t, r in repeats["per_target"].items()
        ]
        lines += ["", f"Repeats (up to {repeats['runs_per_case']} runs a case):"]
        lines.append(table(rows, ["target", "cases", "k", "pass@1", "pass@k", "pass^k", "flaky"]))

    failures = summary.get("failures") or []
    total_failures = summary.get("failures_total", len(failures))
    if failures:
        shown = failures[:MAX_FAILURE_LINES]
        width = max(len(_one_line(f["target"])) for f in shown)
        lines += ["", "Failed cases:"]
        for f in shown:
            case = f"{_one_line(f.get('category') or 'general')}/{_one_line(f.get('case_id'))}"
            if isinstance(f.get("repeat"), int) and f["repeat"] > 0:
                case += f" #r{f['repeat']}"
            reason = _one_line(f.get("reason") or "")
            if f.get("status") == "error":
                reason = f"error: {reason}"
            line = _clip(f"  {_one_line(f['target']).ljust(width)}  {case} — {reason}", LINE_WIDTH)
            lines.append(paint(line, "red") if f.get("status") == "error" else line)
        if total_failures > len(shown):
            lines.append(f"  … and {total_failures - len(shown)} more")

    lines.append("")
    cost = _usd(summary.get("cost_usd"))
    if summary.get("judge_cost_usd") is not None:
        cost += f" (+ {_usd(summary['judge_cost_usd'])} judge)"
    missing = summary.get("cost_missing_cells") or 0
    if missing:
        cost += paint(f" · prices missing for {missing} cell{'s' if missing != 1 else ''}", "yellow")
    latency = summary.get("latency_ms") or {}
    facts = [
        ("Cost", cost),
        ("Duration", _duration(summary.get("duration_s"))),
        ("Latency", f"p50 {_ms(latency.get('p50'))} · p95 {_ms(latency.get('p95'))} · p99 {_ms(latency.get('p99'))}"),
    ]
    cells = totals["cells"]
    if summary.get("cached_cells"):
        facts.append(
            (
                "Cache",
                f"{summary['cached_cells']} of {cells} cells from the response cache ({_pct(summary.get('response_cache_hit_ratio'))})",
            )
        )
    tokens = summary.get("tokens") or {}
    if tokens.get("input") or tokens.get("output"):
        text = f"{tokens['input']:,} in · {tokens['output']:,} out"
        if tokens.get("cache_hit"):
            text += f" · {tokens['cache_hit']:,} prompt-cache hits ({_pct(summary.get('cache_hit_ratio'))} of input)"
        facts.append(("Tokens", text))
    if summary.get("inconclusive_assertions"):
        n = summary["inconclusive_assertions"]
        facts.append(("Inconclusive", f"{n} assertion{'s' if n != 1 else ''} could not decide (no verdict)"))
    label_width = max(len(label) for label, _ in facts)
    lines += [f"{label.ljust(label_width)}  {value}" for label, value in facts]
    return "\n".join(lines) + "\n"
