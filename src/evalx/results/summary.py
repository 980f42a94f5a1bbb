"""A run's summary figures, aggregated cell by cell from :class:`~evalx.results.model.CellResult` lines.

:class:`SummaryBuilder` reads results as they stream (from the executor or
``results.jsonl``) and keeps only counters and latencies, never the results
themselves, so a 100,000-cell run summarises in a few megabytes.
:func:`finish <SummaryBuilder.finish>` returns the figures
(:class:`~evalx.results.model.SummaryFigures`); :mod:`evalx.results.outcome`
adds what only the run knew to make ``summary.json``;
:func:`evalx.reports.text.format_summary` turns it into text.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, TypedDict, cast

from evalx.results import stats as _stats
from evalx.results.figures import finite
from evalx.results.model import (
    STATUSES,
    SUMMARY_VERSION,
    CaseCounts,
    CaseRow,
    CategoryDifficultyFigures,
    CellCounts,
    CellOutput,
    CellResult,
    Distribution,
    ErrorGroup,
    FailureRow,
    FlakyCase,
    FlakyTurn,
    GroupFigures,
    MatrixInfo,
    MeanP95,
    OutputSizes,
    PairwiseRecord,
    PairwiseRow,
    RepeatFigures,
    RepeatsSummary,
    ReviewCounts,
    SlowCell,
    Slowest,
    SummaryFigures,
    TargetFigures,
    failure_reason,
)
from evalx.results.preferences import Disagreements, Preferences
from evalx.results.repeats import DEFAULT_RULE, RULES, Tally, TurnTallies, case_status, status_of

__all__ = ["SUMMARY_VERSION", "ListedFailure", "SummaryBuilder", "listed_failures", "unlisted"]

#: failing cells listed in summary.json (the first ones in matrix order)
MAX_FAILURES = 200
#: the slowest cells listed in ``slowest``; with a ``slow_ms`` threshold, up to MAX_SLOW of those over it
SLOWEST_SHOWN = 5
MAX_SLOW = 20
#: distinct (target, error) pairs counted for ``error_groups`` (a run whose every error differs keeps this many)
MAX_ERROR_KINDS = 10_000
#: error groups listed in summary.json
MAX_ERROR_GROUPS = 50
#: flaky cases listed in summary.json
MAX_FLAKY = 50
#: per-case repeat rows (k/N, verdict, pass@k) listed in summary.json
MAX_CASE_ROWS = 1000
#: target pairs compared in summary.json (in target order)
MAX_PAIRS = 1000
#: pairwise McNemar p-value (Holm-adjusted) under which a difference is claimed
SIGNIFICANCE = 0.05
#: case verdicts a pairwise comparison counts: an error or an inconclusive verdict is no evidence about the model
_GRADED = frozenset(("pass", "fail"))
#: distinct reasons of inconclusive assertions counted in summary.json
MAX_INCONCLUSIVE_REASONS = 20

_PACK = 1 << 32
# A case's repeats packed in one int, low bits first: four 32-bit counts (skipped,
# errored, failed, passed), the case's first matrix index (40 bits) and its
# (category, difficulty) group number. One int a case keeps 100k cases small.
_ADD = {"skipped": 1, "error": _PACK, "fail": _PACK**2, "pass": _PACK**3}
_ORDER_SHIFT = 128
_ORDER_MAX = (1 << 40) - 1
_GROUP_SHIFT = 168


def _unpack(packed: int) -> tuple[Tally, int, int]:
    """(tally, first matrix index, group number) of a packed case."""
    mask = _PACK - 1
    tally = Tally(packed >> 96 & mask, packed >> 64 & mask, packed >> 32 & mask, packed & mask)
    return tally, (packed >> _ORDER_SHIFT) & _ORDER_MAX, packed >> _GROUP_SHIFT


class _CaseCounts:
    """Case-level verdicts (one per target and case, by repeat_pass_rule) for one group."""

    __slots__ = ("counts", "flaky")

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
        self.flaky = 0

    def add(self, status: str, flaky: bool) -> None:
        self.counts[status] += 1
        self.flaky += flaky

    def add_counts(self, by_status: Mapping[str, int]) -> None:
        """Count cases whose verdicts are ``by_status`` (none flaky: one cell each)."""
        for status, n in by_status.items():
            self.counts[status] += n

    def merge(self, other: _CaseCounts) -> None:
        """Count ``other``'s cases in this group too."""
        for status, n in other.counts.items():
            self.counts[status] += n
        self.flaky += other.flaky


def _case_level(group: _CaseCounts | None) -> CaseCounts:
    """A group's case verdict counts with the case pass rate and its 95% Wilson interval."""
    counts: dict[str, int] = group.counts if group is not None else dict.fromkeys(STATUSES, 0)
    flaky = group.flaky if group is not None else 0
    cases = sum(counts.values())
    decided = cases - counts["skipped"]
    rate = counts["pass"] / decided if decided else None
    ci = list(_stats.wilson_interval(counts["pass"], decided)) if decided else None
    return {
        "cases": cases,
        "pass": counts["pass"],
        "fail": counts["fail"],
        "error": counts["error"],
        "skipped": counts["skipped"],
        "flaky": flaky,
        "pass_rate": rate,
        "pass_rate_ci": ci,
    }


def _price_missing(result: CellResult, used_tokens: bool) -> bool:
    """A cell without a cost whose target bills per token: a provider (unless it errored) or an engine that used tokens.

    Python callables are not priced, so they never count; results written
    before ``target_type`` existed fall back to "it used tokens".
    """
    if result.get("cost_note"):  # priced, but the answer had no usage
        return True
    kind = result.get("target_type")
    if kind == "python":
        return False
    if kind == "provider":  # answered (an output, no error) yet unpriced
        return used_tokens or (not result.get("error") and bool(result.get("output")))
    return used_tokens


def _either(result: CellResult, output: CellOutput, key: str) -> float | None:
    """A figure from the result, else from its trajectory (older or partial lines). (None, the usual missing figure, read without a call.)"""
    value = result.get(key)
    if value is not None:
        value = finite(value)
    if value is None:
        value = output.get(key)
        if value is not None:
            value = finite(value)
    return value


#: the largest int a float holds exactly: a count up to it reads as itself, without the float round trip
_EXACT_INT = 2**53


def _tokens(value: Any) -> int:
    """A stored count (tokens, calls, 429s) as a whole number, 0 for anything not a positive finite number."""
    if type(value) is int and 0 <= value <= _EXACT_INT:  # the usual count: as finite() reads it, without the calls
        return value
    number = finite(value)
    return int(number) if number is not None and number > 0 else 0


class _Sizes:
    """A leaf group's (a target's cells of one category and difficulty) output tokens, characters and latencies: 24 bytes a cell."""

    __slots__ = ("chars", "latency", "tokens")

    def __init__(self) -> None:
        self.tokens = array("d")
        self.chars = array("d")
        self.latency = array("d")


def _mean_p95(parts: Iterable[array[float]]) -> MeanP95:
    data = sorted(v for part in parts for v in part)
    return {"mean": _stats.mean(data), "p95": _stats.percentile(data, 95)}


def _output_sizes(leaves: Iterable[_Counts]) -> OutputSizes:
    """The output sizes of the cells of ``leaves`` together (one group's values sorted at a time, then let go)."""
    sizes = [leaf.sizes for leaf in leaves if leaf.sizes is not None]
    return {
        "output_tokens": _mean_p95(s.tokens for s in sizes),
        "output_chars": _mean_p95(s.chars for s in sizes),
        "latency_ms": _mean_p95(s.latency for s in sizes),
    }


class _Counts:
    """Cells by status for one group (a target, a category, a difficulty...), and the sum of their scores."""

    __slots__ = ("by_status", "first", "score_sum", "scored", "sizes")

    def __init__(self, sizes: _Sizes | None = None) -> None:
        self.by_status: dict[str, int] = dict.fromkeys(STATUSES, 0)
        self.first = math.inf  # lowest matrix index seen: groups list in matrix order
        self.score_sum = 0.0
        self.scored = 0
        self.sizes = sizes  # a leaf group's only

    def merge(self, other: _Counts) -> None:
        """Count ``other``'s cells in this group too."""
        for status, n in other.by_status.items():
            self.by_status[status] += n
        self.first = min(self.first, other.first)
        self.score_sum += other.score_sum
        self.scored += other.scored

    def figures(self, case_level: _CaseCounts | None, leaves: Iterable[_Counts] | None = None) -> GroupFigures:
        """The group's cell counts, case-level verdicts and mean score; with the ``leaves`` it sums, their output sizes."""
        figures: GroupFigures = {
            **self.as_dict(),  # type: ignore[typeddict-item]  # mypy looks for the optional "outputs" in a ** item
            "case_level": _case_level(case_level),
            "mean_score": self.score_sum / self.scored if self.scored else None,
            "scored_cells": self.scored,
        }
        if leaves is not None:
            figures["outputs"] = _output_sizes(leaves)
        return figures

    def as_dict(self) -> CellCounts:
        cells = sum(self.by_status.values())
        passed = self.by_status["pass"]
        # Pass rate rule: pass / (cells - skipped). A skipped cell was
        # inconclusive (nothing failed, something could not be decided, e.g. no
        # judge), so it is evidence neither way; errors count against the rate.
        decided = cells - self.by_status["skipped"]
        rate = passed / decided if decided else None
        ci = list(_stats.wilson_interval(passed, decided)) if decided else None
        counts = self.by_status
        return {
            "cells": cells,
            "pass": passed,
            "fail": counts["fail"],
            "error": counts["error"],
            "skipped": counts["skipped"],
            "pass_rate": rate,
            "pass_rate_ci": ci,
        }


class _Target(_Counts):
    """A target's counters, plus what is reported per target only."""

    __slots__ = (
        "batched",
        "cached",
        "cost",
        "cost_cells",
        "cost_missing",
        "costs",
        "groups",
        "judge_cells",
        "judge_cost",
        "latencies",
        "rate",
        "tokens",
        "truncated",
        "ttfts",
        "usage_unknown",
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.groups: dict[tuple[str, str | None], _Counts] = {}  # (category, difficulty) -> this target's cells
        self.latencies = array("d")  # 8 bytes a cell: the only per-cell memory kept
        self.ttfts = array("d")
        self.costs = array("d")  # priced cells only: the cost distribution
        self.tokens = [0, 0, 0]  # input, output, cache hit
        self.cost = 0.0
        self.cost_cells = 0
        self.cost_missing = 0
        self.judge_cost = 0.0
        self.judge_cells = 0
        self.cached = 0
        self.batched = 0  # cells answered from a provider's batch API (priced at its batch price)
        self.truncated = 0
        self.usage_unknown = 0  # cells whose answer reported no usage: their tokens are unknown, not 0
        self.rate: list[float] | None = None  # 429s, seconds waited, most in flight: once a cell has rate_limits


def _ordered(
    counts: Mapping[str, _Counts], case_level: Mapping[str, _CaseCounts], leaves: Mapping[str, list[_Counts]]
) -> dict[str, GroupFigures]:
    """Each group's figures (its output sizes from its ``leaves``), groups in matrix order."""
    return {k: counts[k].figures(case_level.get(k), leaves.get(k, [])) for k in sorted(counts, key=lambda k: counts[k].first)}


def _leaves_by_name(targets: Iterable[_Target]) -> tuple[dict[str, list[_Counts]], dict[str, list[_Counts]]]:
    """The leaf groups of ``targets`` by category and by difficulty."""
    by_category: dict[str, list[_Counts]] = {}
    by_difficulty: dict[str, list[_Counts]] = {}
    for target in targets:
        for (category, difficulty), leaf in target.groups.items():
            by_category.setdefault(category, []).append(leaf)
            if difficulty is not None:
                by_difficulty.setdefault(difficulty, []).append(leaf)
    return by_category, by_difficulty


def _by_category_and_difficulty(
    by_group: Mapping[int, _CaseCounts], group_names: Mapping[int, tuple[str, str | None]]
) -> tuple[dict[str, _CaseCounts], dict[str, _CaseCounts]]:
    """Case verdicts by (category, difficulty) group number, summed by category and by difficulty."""
    by_category: dict[str, _CaseCounts] = {}
    by_difficulty: dict[str, _CaseCounts] = {}
    for number, group_cases in by_group.items():
        category, difficulty = group_names[number]
        by_category.setdefault(category, _CaseCounts()).merge(group_cases)
        if difficulty is not None:
            by_difficulty.setdefault(difficulty, _CaseCounts()).merge(group_cases)
    return by_category, by_difficulty


class _Breakdown(TypedDict):
    """A target's own category and difficulty figures (keys of :class:`~evalx.results.model.TargetFigures`)."""

    per_category: dict[str, GroupFigures]
    per_difficulty: dict[str, GroupFigures]
    per_category_difficulty: list[CategoryDifficultyFigures]


def _breakdown(target: _Target, cases: Mapping[int, _CaseCounts], group_names: Mapping[int, tuple[str, str | None]]) -> _Breakdown:
    """One target's cells by category, by difficulty and by both, in matrix order: the per-target tables."""
    categories: dict[str, _Counts] = {}
    difficulties: dict[str, _Counts] = {}
    for (category, difficulty), counts in target.groups.items():
        categories.setdefault(category, _Counts()).merge(counts)
        if difficulty is not None:
            difficulties.setdefault(difficulty, _Counts()).merge(counts)
    case_groups = {group_names[number]: group_cases for number, group_cases in cases.items()}
    by_category, by_difficulty = _by_category_and_difficulty(cases, group_names)
    cross: list[CategoryDifficultyFigures] = []
    for (category, difficulty), counts in sorted(target.groups.items(), key=lambda kv: (categories[kv[0][0]].first, kv[1].first)):
        cross.append({"category": category, "difficulty": difficulty, **counts.figures(case_groups.get((category, difficulty)), [counts])})
    leaves_by_category, leaves_by_difficulty = _leaves_by_name([target])
    return {
        "per_category": _ordered(categories, by_category, leaves_by_category),
        "per_difficulty": _ordered(difficulties, by_difficulty, leaves_by_difficulty),
        "per_category_difficulty": cross,
    }


def _latency_stats(values: Iterable[float]) -> Distribution:
    data = sorted(values)
    return {
        "p50": _stats.percentile(data, 50),
        "p95": _stats.percentile(data, 95),
        "p99": _stats.percentile(data, 99),
        "mean": _stats.mean(data),
        "total": math.fsum(data) if data else None,
    }


def _pair(a: str, b: str, verdicts_a: Mapping[str, str], verdicts_b: Mapping[str, str]) -> PairwiseRow:
    """Targets ``a`` and ``b`` over their comparable cases, unadjusted (``_pairwise`` adjusts and decides)."""
    both_pass = only_a = only_b = both_fail = 0
    for case, sa in verdicts_a.items():
        sb = verdicts_b.get(case)
        if sa not in _GRADED or sb not in _GRADED:
            continue
        if sa == "pass":
            if sb == "pass":
                both_pass += 1
            else:
                only_a += 1
        elif sb == "pass":
            only_b += 1
        else:
            both_fail += 1
    comparable = both_pass + only_a + only_b + both_fail
    either = len(verdicts_a.keys() | verdicts_b.keys())
    row: PairwiseRow = {
        "a": a,
        "b": b,
        "comparable": comparable,
        "not_comparable": either - comparable,
        "both_pass": both_pass,
        "only_a": only_a,
        "only_b": only_b,
        "both_fail": both_fail,
        "ties": both_pass + both_fail,
        "pass_rate_a": None,
        "pass_rate_b": None,
        "difference": None,
        "difference_ci": None,
        "p_value": None,
        "p_adjusted": None,
        "adjustment": "none",
        "family": 0,
        "significant": False,
        "winner": None,
        "conclusion": "not comparable",
    }
    if comparable:
        row["pass_rate_a"] = (both_pass + only_a) / comparable
        row["pass_rate_b"] = (both_pass + only_b) / comparable
        row["difference"] = (only_a - only_b) / comparable
        row["difference_ci"] = list(_stats.paired_difference_interval(both_pass, only_a, only_b, both_fail))
        row["p_value"] = _stats.mcnemar_exact(only_a, only_b)
        row["conclusion"] = "no clear difference"
    return row


class SummaryBuilder:
    """Accumulates a run's summary one result dict at a time.

    Memory per cell is a latency (and a TTFT) as 8-byte floats; per case
    (target, dataset, case id) two counters, for pass@k and flakiness when a
    run has repeats. Everything else is a running total.
    """

    def __init__(
        self,
        run_id: str,
        name: str,
        started_at: str,
        *,
        repeat_pass_rule: str = DEFAULT_RULE,
        matrix: MatrixInfo | dict[str, Any] | None = None,
        per_case: bool = True,
        slow_ms: float | None = None,
    ) -> None:
        """``per_case``: keep each case's repeats (False only when every case has one cell: one target, no repeats,
        so a case's verdict is its cell's and no two targets are compared; memory then stays flat in the cells).
        ``slow_ms``: cells slower than this are counted and listed in ``slowest`` (``defaults.slow_ms``)."""
        if repeat_pass_rule not in RULES:
            raise ValueError(f"unknown repeat_pass_rule {repeat_pass_rule!r} (one of {', '.join(RULES)})")
        self.run_id = run_id
        self.name = name
        self.started_at = started_at
        self.repeat_pass_rule = repeat_pass_rule
        self.matrix = cast("MatrixInfo | None", matrix)  # a matrix run's variants, recorded as given
        self._totals = _Counts()
        self._targets: dict[str, _Target] = {}
        self._categories: dict[str, _Counts] = {}
        self._difficulties: dict[str, _Counts] = {}
        #: (target, category, difficulty) -> the target's counters and the groups its cells count in
        self._chains: dict[tuple[str, str, str | None], tuple[_Target, tuple[_Counts, ...]]] = {}
        # "target\x1fdataset\x1fcase_id" -> the repeats' statuses packed by _ADD:
        # one int a case rather than a list, a third of the memory on big runs
        self._cases: dict[str, int] = {}
        # (category, difficulty) -> group number packed into each case's int
        self._groups: dict[tuple[str, str | None], int] = {}
        self._max_repeat = 0
        self._turns = TurnTallies()  # per-turn tallies, of conversation cases only (for flaky turns)
        self._inconclusive = 0
        self._inconclusive_reasons: dict[str, int] = {}  # reason -> count, at most MAX_INCONCLUSIVE_REASONS kept
        self._judge = [0, 0, 0, 0]  # judge calls, input tokens, output tokens, cached calls
        # max-heap (negated order) of the first MAX_FAILURES failures in matrix order
        self._failures: list[tuple[float, int, FailureRow]] = []
        self._failures_total = 0
        self._errors: dict[tuple[str, str], int] = {}  # (target, reason) -> errored cells, at most MAX_ERROR_KINDS kept
        self._errors_first: dict[tuple[str, str], float] = {}  # (target, reason) -> its first cell's matrix order
        self._seen = 0
        self._per_case = per_case
        #: set when built without ``per_case`` yet a case had several cells: its case-level figures would be wrong
        self.needs_per_case = False
        self._preferences = Preferences()  # pairwise judge records, one per comparison
        self._disagreements = Disagreements()  # judge vs function, on cells with named checks
        self._reviews = [0, 0]  # cells with a review mark, of which overridden (the mark changed the status)
        self._slow_ms = slow_ms
        self._slow_over = 0
        # min-heap of (latency, -matrix order, -arrival, cell) of the slowest cells, at most _slow_keep of them
        self._slowest: list[tuple[float, float, int, SlowCell]] = []
        self._slow_keep = MAX_SLOW if slow_ms is not None else SLOWEST_SHOWN

    def add(self, result: CellResult) -> None:
        """Count one cell's result (a ``results.jsonl`` line, parsed)."""
        arrival = self._seen
        self._seen += 1
        status = result.get("status")
        if status not in STATUSES:
            status = "error"  # an unknown status must never read as a pass
        assert isinstance(status, str)
        if "review" in result:  # a review mark applied on reading (evalx.results.reviews): the status is the reviewed verdict
            self._reviews[0] += 1
            review = result["review"]
            self._reviews[1] += isinstance(review, dict) and review.get("original_status") != status
        index = result.get("index")
        order = float(index) if isinstance(index, int) and not isinstance(index, bool) else math.inf

        target_id = str(result.get("target") or "")
        category = str(result.get("category") or "general")
        difficulty = result.get("difficulty")
        if difficulty is not None:
            difficulty = str(difficulty)
        score = result.get("score")
        if score is not None:
            score = finite(score)

        group_key = (category, difficulty)
        chain = self._chains.get((target_id, category, difficulty))
        if chain is None:  # the groups a cell of this target, category and difficulty counts in, found once
            chain = self._chain(target_id, group_key)
        target, groups = chain
        for counts in groups:  # the cell counted in each (inline: a call per group was a fifth of this method)
            counts.by_status[status] += 1
            if order < counts.first:
                counts.first = order
            if score is not None:
                counts.score_sum += score
                counts.scored += 1

        output = result.get("output")
        output = output if isinstance(output, dict) else {}

        latency = result.get("latency_ms")
        if type(latency) is not float or not math.isfinite(latency):
            latency = _either(result, output, "latency_ms")
        sizes = groups[-1].sizes
        assert sizes is not None
        if latency is not None and latency >= 0:
            target.latencies.append(latency)
            sizes.latency.append(latency)
            if self._slow_ms is not None and latency > self._slow_ms:
                self._slow_over += 1
            if len(self._slowest) < self._slow_keep or latency >= self._slowest[0][0]:
                self._keep_slow(latency, order, arrival, target_id, result, status)
        text = output.get("text")
        if type(text) is str and status != "error":
            sizes.chars.append(len(text))
        ttft = _either(result, output, "ttft_ms")
        if ttft is not None and ttft >= 0:
            target.ttfts.append(ttft)

        raw_usage = output.get("usage")
        usage: Mapping[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        raw = output.get("raw")
        if result.get("cost_note") or (type(raw) is dict and raw.get("usage_note")):  # the answer said nothing of its tokens
            target.usage_unknown += 1
        tokens_in = _tokens(usage.get("input_tokens"))
        tokens_out = _tokens(usage.get("output_tokens"))
        if "output_tokens" in usage:
            sizes.tokens.append(tokens_out)
        target.tokens[0] += tokens_in
        target.tokens[1] += tokens_out
        target.tokens[2] += _tokens(usage.get("cache_hit_tokens"))

        cost = _either(result, output, "cost_usd")
        if cost is not None:
            target.cost += cost
            target.cost_cells += 1
            target.costs.append(cost)
        elif _price_missing(result, bool(tokens_in or tokens_out)):  # a priced resource we could not price
            target.cost_missing += 1
        judge_cost = finite(result.get("judge_cost_usd"))
        if judge_cost is not None:
            target.judge_cost += judge_cost
            target.judge_cells += 1
        if result.get("cached"):
            target.cached += 1
        if type(raw) is dict and raw.get("batch_id") is not None:
            target.batched += 1
        if result.get("truncated") is True:
            target.truncated += 1
        limits = result.get("rate_limits")
        if type(limits) is dict:
            rate = target.rate if target.rate is not None else [0.0, 0.0, 0.0]
            target.rate = rate
            rate[0] += _tokens(limits.get("responses_429"))
            rate[1] += round((finite(limits.get("wait_s")) or 0.0) * 1000)  # whole ms: the same sum in any order
            rate[2] = max(rate[2], _tokens(limits.get("concurrency")))

        named = False
        for assertion in result.get("assertions") or []:
            if not isinstance(assertion, dict):
                continue
            if assertion.get("name"):
                named = True
            if assertion.get("passed") is None and not assertion.get("error"):
                self._inconclusive += 1
                why = str(assertion.get("reason") or "no verdict")
                if why in self._inconclusive_reasons or len(self._inconclusive_reasons) < MAX_INCONCLUSIVE_REASONS:
                    self._inconclusive_reasons[why] = self._inconclusive_reasons.get(why, 0) + 1
            details = assertion.get("details")
            if isinstance(details, dict) and "calls" in details:  # a model-graded assertion's judge usage
                calls = _tokens(details.get("calls"))
                self._judge[0] += calls
                self._judge[1] += _tokens(details.get("input_tokens"))
                self._judge[2] += _tokens(details.get("output_tokens"))
                self._judge[3] += calls if details.get("cached") else 0
        if named:  # a judge and a function check may share a name: do they agree?
            self._disagreements.add(result, result.get("assertions") or [])
        pairwise = result.get("pairwise")
        if pairwise is not None:
            self._preferences.add(pairwise)

        repeat = result.get("repeat")
        if isinstance(repeat, int) and repeat > self._max_repeat:
            self._max_repeat = repeat
        if self._per_case:
            key = f"{target_id}\x1f{result.get('dataset') or ''}\x1f{result.get('case_id') or ''}"
            position = int(min(order, _ORDER_MAX))
            packed = self._cases.get(key)
            if packed is None:
                group = self._groups.setdefault(group_key, len(self._groups))
                packed = (group << _GROUP_SHIFT) | (position << _ORDER_SHIFT)
            else:
                first = (packed >> _ORDER_SHIFT) & _ORDER_MAX
                if position < first:
                    packed -= (first - position) << _ORDER_SHIFT
            self._cases[key] = packed + _ADD[status]
            turns = result.get("turns")
            if turns is not None:  # a conversation: its turns tallied too
                self._turns.add(key, turns)
        else:
            if group_key not in self._groups:
                self._groups[group_key] = len(self._groups)
            if (isinstance(repeat, int) and repeat > 0) or len(self._targets) > 1:
                self.needs_per_case = True  # told one cell a case, but a case has more: read again with per_case

        if status in ("fail", "error"):
            self._failures_total += 1
            entry: FailureRow = {
                "target": target_id,
                "dataset": result.get("dataset"),
                "case_id": result.get("case_id"),
                "repeat": repeat,
                "category": result.get("category"),
                "status": status,
                "reason": failure_reason(result, status),
            }
            heapq.heappush(self._failures, (-order, -arrival, entry))
            if len(self._failures) > MAX_FAILURES:
                heapq.heappop(self._failures)  # drops the latest in matrix order
            if status == "error":
                kind = (entry["target"], entry["reason"])
                if kind in self._errors or len(self._errors) < MAX_ERROR_KINDS:
                    self._errors[kind] = self._errors.get(kind, 0) + 1
                    self._errors_first[kind] = min(order, self._errors_first.get(kind, math.inf))

    def _keep_slow(self, latency: float, order: float, arrival: int, target_id: str, result: CellResult, status: str) -> None:
        """Keep the cell among the slowest: equal latencies in matrix order (the first kept), so a summary rebuilt
        from the stored results (in matrix order) lists the same cells as the run's (in the order they ended)."""
        repeat = result.get("repeat")
        cell: SlowCell = {
            "target": target_id,
            "dataset": str(result.get("dataset") or ""),
            "case_id": str(result.get("case_id") or ""),
            "repeat": repeat if type(repeat) is int else 0,
            "status": status,
            "latency_ms": latency,
        }
        entry = (latency, -order, -arrival, cell)
        if len(self._slowest) < self._slow_keep:
            heapq.heappush(self._slowest, entry)
        elif entry[:3] > self._slowest[0][:3]:
            heapq.heapreplace(self._slowest, entry)

    def _slowest_figures(self) -> Slowest:
        ranked = [entry[3] for entry in sorted(self._slowest, key=lambda e: e[:3], reverse=True)]
        if self._slow_ms is None:
            return {"threshold_ms": None, "over_threshold": None, "cells": ranked[:SLOWEST_SHOWN]}
        over = [c for c in ranked if c["latency_ms"] > self._slow_ms]
        return {"threshold_ms": self._slow_ms, "over_threshold": self._slow_over, "cells": over or ranked[:SLOWEST_SHOWN]}

    def add_pairwise(self, records: list[PairwiseRecord]) -> None:
        """Count the pairwise judge's records (the run's pass, after its cells were added); a comparison counts once."""
        self._preferences.add(records)

    def _chain(self, target_id: str, group_key: tuple[str, str | None]) -> tuple[_Target, tuple[_Counts, ...]]:
        """A target's counters and every group its cells of ``group_key`` (category, difficulty) count in, made as needed."""
        category, difficulty = group_key
        target = self._targets.get(target_id)
        if target is None:
            target = self._targets[target_id] = _Target()
        groups: list[_Counts] = [self._totals, target, self._categories.setdefault(category, _Counts())]
        if difficulty is not None:
            groups.append(self._difficulties.setdefault(difficulty, _Counts()))
        leaf = target.groups.get(group_key)
        if leaf is None:
            leaf = target.groups[group_key] = _Counts(_Sizes())
        groups.append(leaf)  # the last of the chain: the leaf, which keeps the output sizes
        chain = self._chains[(target_id, category, difficulty)] = (target, tuple(groups))
        return chain

    def _tallies(self, target_order: list[str]) -> dict[str, list[tuple[str, str, Tally]]]:
        """Each target's cases (dataset, case id, tally), in matrix order."""
        rows: dict[str, list[tuple[int, str, str, Tally]]] = {t: [] for t in target_order}
        for key, packed in self._cases.items():
            target_id, dataset, case_id = key.split("\x1f", 2)
            tally, first, _ = _unpack(packed)
            rows.setdefault(target_id, []).append((first, dataset, case_id, tally))
        return {t: [(d, c, tally) for _, d, c, tally in sorted(cases, key=itemgetter(0, 1, 2))] for t, cases in rows.items()}

    def _repeats(self, target_order: list[str]) -> RepeatsSummary | None:
        """pass@k, pass^k, flaky cases and per-case k/N, when the run repeated its cases."""
        if self._max_repeat == 0:
            return None
        rule = self.repeat_pass_rule
        tallies = self._tallies(target_order)
        per_target: dict[str, RepeatFigures] = {}
        flaky: list[FlakyCase] = []
        flaky_turns: list[FlakyTurn] = []
        rows: list[CaseRow] = []
        total_rows = 0
        for target_id, all_cases in tallies.items():
            cases = [(d, c, t) for d, c, t in all_cases if t.decided]  # all-skipped cases carry no evidence
            if not cases:
                continue
            # k is the repeat count every case reached, so each estimate is defined
            k = min(t.decided for _, _, t in cases)
            flaky_here = [(d, c, t) for d, c, t in cases if t.flaky]
            per_target[target_id] = {
                "cases": len(cases),
                "k": k,
                "pass_at_1": _stats.mean(t.passed / t.decided for _, _, t in cases),
                "pass_at_k": _stats.mean(_stats.pass_at_k(t.decided, t.passed, k) for _, _, t in cases),
                "pass_hat_k": _stats.mean(_stats.pass_hat_k(t.decided, t.passed, k) for _, _, t in cases),
                "flaky_cases": len(flaky_here),
            }
            flaky.extend(
                {"target": target_id, "dataset": d, "case_id": c, "passed": t.passed, "runs": t.decided, "status": case_status(t, rule)}
                for d, c, t in flaky_here
            )
            if self._turns:
                flaky_turns.extend(
                    {"target": target_id, "dataset": d, "case_id": c, "turn": n, "passed": p, "runs": runs}
                    for d, c, _ in all_cases
                    for n, p, runs in self._turns.flaky(f"{target_id}\x1f{d}\x1f{c}")
                )
            for d, c, t in all_cases:
                total_rows += 1
                if len(rows) < MAX_CASE_ROWS:
                    rows.append(
                        {
                            "target": target_id,
                            "dataset": d,
                            "case_id": c,
                            "runs": t.decided,
                            "passed": t.passed,
                            "failed": t.failed,
                            "errored": t.errored,
                            "skipped": t.skipped,
                            "status": case_status(t, rule),
                            "flaky": t.flaky,
                            "pass_at_k": _stats.pass_at_k(t.decided, t.passed, k) if t.decided >= k else None,
                            "pass_hat_k": _stats.pass_hat_k(t.decided, t.passed, k) if t.decided >= k else None,
                        }
                    )
        out: RepeatsSummary = {
            "runs_per_case": self._max_repeat + 1,
            "repeat_pass_rule": rule,
            "per_target": per_target,
            "flaky_cases": len(flaky),
            "flaky": flaky[:MAX_FLAKY],
            "cases": rows,
            "cases_total": total_rows,
        }
        if self._turns:  # the run has conversations: their flaky turns
            out["flaky_turns"] = flaky_turns[:MAX_FLAKY]
            out["flaky_turns_total"] = len(flaky_turns)
        return out

    def _pairwise(self, target_order: list[str], verdicts: dict[str, dict[str, str]]) -> list[PairwiseRow]:
        """Every pair of targets over the cases both graded: a 2×2 table, McNemar's exact test, Holm's adjustment, a verdict.

        A case is comparable when both sides' case verdicts are ``pass`` or
        ``fail``: an error or an inconclusive verdict is no evidence about the
        model, so a target its server did not know (an error on every cell)
        is "not comparable", never a loser. The verdict uses the p-value
        adjusted (Holm) over every pair that has a comparable case.
        """
        pairs: list[PairwiseRow] = []
        total = len(target_order) * (len(target_order) - 1) // 2
        for i, a in enumerate(target_order):
            for b in target_order[i + 1 :]:
                if len(pairs) >= MAX_PAIRS:
                    break
                pairs.append(_pair(a, b, verdicts.get(a, {}), verdicts.get(b, {})))
        tested = [p for p in pairs if p["p_value"] is not None]
        raw = [p["p_value"] for p in tested if p["p_value"] is not None]
        if total > len(pairs):  # pairs left out of the listing: Bonferroni over all of them bounds Holm's from above
            adjusted, method, family = [min(1.0, total * p) for p in raw], "bonferroni", total
        else:
            adjusted, method, family = _stats.holm_adjust(raw), "holm" if len(raw) > 1 else "none", len(raw)
        for row, p_adjusted in zip(tested, adjusted, strict=True):
            row["p_adjusted"], row["adjustment"], row["family"] = p_adjusted, method, family
            if p_adjusted < SIGNIFICANCE:
                winner, loser = (row["b"], row["a"]) if row["only_b"] > row["only_a"] else (row["a"], row["b"])
                row["significant"], row["winner"], row["conclusion"] = True, winner, f"{winner} beats {loser}"
        for row in pairs:
            if row["p_value"] is None:
                row["adjustment"], row["family"] = method, family
        return pairs

    def finish(self, finished_at: str, duration_s: float) -> SummaryFigures:
        """The summary's figures as a JSON-ready dict, ``"version"`` first.

        What only the run knows (config, interrupted, baseline, gates...) is
        added by :func:`evalx.results.outcome.finish_summary`.
        """
        targets = sorted(self._targets, key=lambda t: self._targets[t].first)
        rule = self.repeat_pass_rule
        group_names = {number: name for name, number in self._groups.items()}
        # case-level verdicts: one per (target, case), by repeat_pass_rule; straight
        # from the packed ints, as a 100k-case run must summarise in well under a second
        verdicts: dict[str, dict[str, str]] = {t: {} for t in targets}  # only filled to compare targets
        compare = len(targets) >= 2
        all_cases = _CaseCounts()
        case_counts = {t: _CaseCounts() for t in targets}
        # group number -> case verdicts, per target; summed over targets afterwards
        target_groups: dict[str, dict[int, _CaseCounts]] = {t: {} for t in targets}
        mask = _PACK - 1
        for key, packed in self._cases.items():
            target_id, case_key = key.split("\x1f", 1)
            passed, failed, errored = packed >> 96 & mask, packed >> 64 & mask, packed >> 32 & mask
            status = status_of(passed, failed, errored, rule)
            flaky = 0 < passed < passed + failed + errored
            if compare:
                verdicts[target_id][case_key] = status
            case_counts[target_id].add(status, flaky)
            all_cases.add(status, flaky)
            groups_here = target_groups[target_id]
            number = packed >> _GROUP_SHIFT
            group_cases = groups_here.get(number)
            if group_cases is None:
                group_cases = groups_here[number] = _CaseCounts()
            group_cases.add(status, flaky)
        if not self._per_case:  # one cell a case: each case's verdict is its cell's status
            for target_id in targets:
                t = self._targets[target_id]
                case_counts[target_id].add_counts(t.by_status)
                all_cases.add_counts(t.by_status)
                for group_key, group_cells in t.groups.items():
                    target_groups[target_id].setdefault(self._groups[group_key], _CaseCounts()).add_counts(group_cells.by_status)
        by_group = {number: _CaseCounts() for number in group_names}
        for groups_here in target_groups.values():
            for number, group_cases in groups_here.items():
                by_group[number].merge(group_cases)
        by_category, by_difficulty = _by_category_and_difficulty(by_group, group_names)
        per_target: dict[str, TargetFigures] = {}
        pair_costs = self._preferences.cost_by_target()  # the pairwise judge's cost, half to each side of a pair
        for target_id in targets:
            t = self._targets[target_id]
            per_target[target_id] = {
                **t.figures(case_counts.get(target_id)),
                "latency_ms": _latency_stats(t.latencies),
                "ttft_ms": _latency_stats(t.ttfts),
                "tokens": {"input": t.tokens[0], "output": t.tokens[1], "cache_hit": t.tokens[2]},
                # prompt-cache tokens as a share of this target's input tokens
                "cache_hit_ratio": t.tokens[2] / t.tokens[0] if t.tokens[0] else None,
                "cost_usd": t.cost if t.cost_cells else None,
                # per priced cell: the spread behind the total
                "cost_usd_stats": {**_latency_stats(t.costs), "cells": t.cost_cells},
                "cost_per_pass_usd": t.cost / t.by_status["pass"] if t.cost_cells and t.by_status["pass"] else None,
                "cost_missing_cells": t.cost_missing,
                "usage_unknown_cells": t.usage_unknown,
                "truncated_cells": t.truncated,
                "judge_cost_usd": t.judge_cost + pair_costs.get(target_id, 0.0) if t.judge_cells or target_id in pair_costs else None,
                "cached_cells": t.cached,
                "batched_cells": t.batched,
                **_breakdown(t, target_groups[target_id], group_names),  # type: ignore[typeddict-item]  # rate_limits: below
            }
            if t.rate is not None:
                per_target[target_id]["rate_limits"] = {
                    "responses_429": int(t.rate[0]),
                    "wait_s": t.rate[1] / 1000,
                    "max_concurrency": int(t.rate[2]),
                }

        groups = self._targets.values()
        leaves_by_category, leaves_by_difficulty = _leaves_by_name(groups)
        cells = sum(self._totals.by_status.values())
        tokens_in = sum(t.tokens[0] for t in groups)
        tokens_cache = sum(t.tokens[2] for t in groups)
        cached = sum(t.cached for t in groups)

        failures = [entry for _, _, entry in sorted(self._failures, reverse=True)]
        pairs = self._pairwise(targets, verdicts) if len(targets) >= 2 else []
        self._preferences.annotate(pairs)
        pair_calls = self._preferences.usage()
        summary: SummaryFigures = {
            "version": SUMMARY_VERSION,
            "run_id": self.run_id,
            "name": self.name,
            "started_at": self.started_at,
            "finished_at": finished_at,
            "duration_s": duration_s,
            "repeat_pass_rule": rule,
            "totals": self._totals.figures(all_cases),
            "per_target": per_target,
            "per_category": _ordered(self._categories, by_category, leaves_by_category),
            "per_difficulty": _ordered(self._difficulties, by_difficulty, leaves_by_difficulty),
            "matrix": self.matrix,
            "pairwise": pairs,
            # overall percentiles from the per-target samples: no second copy kept while streaming
            "latency_ms": _latency_stats(v for t in groups for v in t.latencies),
            "ttft_ms": _latency_stats(v for t in groups for v in t.ttfts),
            "tokens": {"input": tokens_in, "output": sum(t.tokens[1] for t in groups), "cache_hit": tokens_cache},
            # prompt-cache tokens as a share of input tokens
            "cache_hit_ratio": tokens_cache / tokens_in if tokens_in else None,
            "cost_usd": sum(t.cost for t in groups) if any(t.cost_cells for t in groups) else None,
            "cost_missing_cells": sum(t.cost_missing for t in groups),
            "usage_unknown_cells": sum(t.usage_unknown for t in groups),
            "truncated_cells": sum(t.truncated for t in groups),
            "judge_cost_usd": sum(t.judge_cost for t in groups) + sum(pair_costs.values())
            if any(t.judge_cells for t in groups) or pair_costs
            else None,
            "cached_cells": cached,
            "batched_cells": sum(t.batched for t in groups),
            # cells answered from evalx's own response cache
            "response_cache_hit_ratio": cached / cells if cells else None,
            "inconclusive_assertions": self._inconclusive,
            "inconclusive_reasons": dict(sorted(self._inconclusive_reasons.items(), key=lambda kv: -kv[1])),
            # model-graded assertions' judge usage; its cost is judge_cost_usd, apart from the targets'
            "judge": {
                "calls": self._judge[0] + pair_calls[0],
                "input_tokens": self._judge[1] + pair_calls[1],
                "output_tokens": self._judge[2] + pair_calls[2],
                "cached_calls": self._judge[3] + pair_calls[3],
            },
            "repeats": self._repeats(targets),
            "failures": failures,
            "failures_total": self._failures_total,
            "slowest": self._slowest_figures(),
            "error_groups": self._error_groups(),
            "judge_disagreements": self._disagreements.figures(),
        }
        reviews = self.review_counts
        if reviews is not None:
            cast("dict[str, Any]", summary)["reviews"] = reviews  # RunSummary's, when review marks applied
        return summary

    @property
    def review_counts(self) -> ReviewCounts | None:
        """The review marks the cells added so far carried (``summary.json``'s ``reviews``), None when no cell had one."""
        if not self._reviews[0]:
            return None
        return {"reviewed_cells": self._reviews[0], "overridden_cells": self._reviews[1]}

    def _error_groups(self) -> list[ErrorGroup]:
        """Errors several cells share, the most shared first; equal counts in the matrix order of their first cell, so a
        summary rebuilt from the stored results (in matrix order) lists them as the run did (in the order cells ended)."""
        shared = [(count, kind) for kind, count in self._errors.items() if count > 1]
        shared.sort(key=lambda item: (-item[0], self._errors_first[item[1]]))
        return [{"target": t, "reason": r, "count": n} for n, (t, r) in shared[:MAX_ERROR_GROUPS]]


@dataclass(frozen=True)
class ListedFailure:
    """A line of a report's list of failures: one failing cell, or an error several cells share (``count`` > 1)."""

    #: the (first) cell
    row: FailureRow
    #: the cells it stands for: 1, or the error's count over the whole run
    count: int = 1


def listed_failures(summary: Mapping[str, Any]) -> list[ListedFailure]:
    """The failures every report lists, an error that cells of a target share listed once with its count.

    The terminal summary, ``summary.txt`` and the Markdown summary all list through this;
    :func:`unlisted` counts the failing cells a shown part of it does not stand for.
    """
    rows: list[FailureRow] = list(summary.get("failures") or [])
    groups = {(g["target"], g["reason"]): int(g["count"]) for g in summary.get("error_groups") or []}
    listed: list[ListedFailure] = []
    said: set[tuple[str, str]] = set()
    for row in rows:
        kind = (row["target"], row["reason"])
        if row.get("status") == "error" and kind in groups:
            if kind not in said:
                said.add(kind)
                listed.append(ListedFailure(row, groups[kind]))
            continue
        listed.append(ListedFailure(row))
    return listed


def unlisted(summary: Mapping[str, Any], shown: list[ListedFailure]) -> int:
    """The failing cells of the run that ``shown`` lines do not stand for (the ``… and N more``)."""
    total = int(summary.get("failures_total", len(summary.get("failures") or [])) or 0)
    return max(0, total - sum(item.count for item in shown))


# ---------------------------------------------------------------- rendering
