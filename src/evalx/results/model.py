"""The results format, declared once: a cell result (a ``results.jsonl`` line) and a run summary (``summary.json``).

This module is where a reader learns what evalx writes. The executor builds
every cell result with :func:`cell_result`, whatever its status; every reader
(the summary, compare, gates, history, capture, each report) takes
:class:`CellResult` and :class:`RunSummary`; ``docs/results-format.md`` is
the prose version of this file. Tests check that every key a real run writes
is declared here, and that every required key is written.

Why ``TypedDict``: measured with ``python bench/result_model.py -n 50000
--repeats 5`` (build one provider-like result, encode it to a line, decode
it back, read the fields the summary reads; best of 5 interleaved rounds),
three runs on the shared 2-core machine while other work ran on it (load
5-7: absolute figures are noisy, the ratios within a run are what count)::

    representation                   µs per result (run 1 / 2 / 3)   vs TypedDict
    TypedDict (a dict, stdlib json)     96.9 / 122.0 / 60.3          1.00
    dataclass(slots=True)               88.8 /  93.0 / 58.8          0.92 / 0.76 / 0.98
    msgspec.Struct (msgspec.json)       38.9 /  26.6 / 17.9          0.40 / 0.22 / 0.30
    TypedDict + msgspec.json codec      39.6 /  28.0 / 24.5          0.41 / 0.23 / 0.41

A ``TypedDict`` costs nothing at run time: a result is the dict evalx always
wrote, ``results.jsonl`` stays byte for byte the same, and readers stay
tolerant of older or hand-edited lines. ``dataclass(slots=True)`` gains
nothing clear: the encoder needs a dict anyway (a ``to_dict`` per line) and
reading a line back builds the objects again. ``msgspec.Struct`` is 2.5-4.5×
faster, but nearly all of that is msgspec's JSON codec, which plain dicts get
too (last row); what the Struct itself saves over that is 1-7 µs a result,
under 1% of a provider cell's ~770 µs end to end (1,300 cells/s) — not a clear win for a new
dependency, strict decoding that rejects older lines, and a redactor and every
reader rewritten for attributes. So: ``TypedDict``. The codec is a separate
choice (a new dependency; the lines would have to stay byte-identical).

:func:`cell_result` takes positional parameters: in the same runs it cost
6.1 / 3.6 / 3.0 µs a result against 5.8 / 3.5 / 2.8 µs for the dict literal
the executor spelled out before (≤ 0.3 µs a cell).
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from evalx.common.json_types import JSONObject
from evalx.models import Case, is_truncated
from evalx.tracing.spans import TraceRecord, TracingReport

__all__ = [
    "RESULT_VERSION",
    "STATUSES",
    "SUMMARY_VERSION",
    "AssertionRecord",
    "BaselineView",
    "CaseChange",
    "CaseCounts",
    "CaseRow",
    "CategoryDifficultyFigures",
    "CellCounts",
    "CellOutput",
    "CellResult",
    "CellReview",
    "Comparison",
    "CostDistribution",
    "CostGuardReport",
    "Distribution",
    "ErrorGroup",
    "FailureRow",
    "FlakyCase",
    "FlakyChange",
    "FlakyTurn",
    "GateReport",
    "GateResult",
    "GroupFigures",
    "JudgeDisagreement",
    "JudgeDisagreements",
    "JudgePreference",
    "JudgeUsage",
    "MatrixInfo",
    "MatrixVariant",
    "MeanP95",
    "MergeReport",
    "Metric",
    "OutputSizes",
    "PairwiseOrder",
    "PairwiseRecord",
    "PairwiseRow",
    "RepeatFigures",
    "RepeatsSummary",
    "RunHeader",
    "RunSummary",
    "ShardReport",
    "SimulationRecord",
    "SlowCell",
    "Slowest",
    "Status",
    "SummaryFigures",
    "TargetDelta",
    "TargetFigures",
    "Tokens",
    "ToolCallRecord",
    "TurnRecord",
    "TurnUser",
    "UsageRecord",
    "cell_result",
    "failure_reason",
    "not_run",
]

#: the results format (``version`` of a cell as readers get it; a v2 file says it in its run record).
#: 1: every line a whole cell; 2: a run record, case records and compact cell lines
#: (:mod:`evalx.results.compact`). :func:`evalx.results.store.read_results` reads both the same.
RESULT_VERSION = 2
#: ``version`` of ``summary.json``. 2 added case-level verdicts (repeat_pass_rule),
#: pairwise comparisons, cost distributions and the matrix.
SUMMARY_VERSION = 2

Status = Literal["pass", "fail", "error", "skipped"]
#: cell statuses, in the order reports list them
STATUSES: tuple[Status, ...] = ("pass", "fail", "error", "skipped")


# ---------------------------------------------------------------- results.jsonl


#: keys an assertion record has only when they apply (functional syntax: ``not`` is a Python keyword)
_AssertionExtras = TypedDict(
    "_AssertionExtras",
    {
        "not": bool,  # true when the assertion was negated with `not: true`
        "error": str,  # the assertion itself broke (an unreadable judge verdict, a check that raised): the cell errors
        "details": dict[str, Any],  # more to say: a judge's raw text, calls, tokens, cost_usd, cached...
        "turn": int,  # in a conversation: the 1-based turn whose reply it checked (absent: the whole conversation)
    },
    total=False,
)


class AssertionRecord(_AssertionExtras):
    """What one assertion concluded about a cell (an item of ``CellResult.assertions``).

    Besides the keys below, ``not`` (true: negated with ``not: true``),
    ``error`` (the assertion itself broke: the cell errors) and ``details``
    (a judge's raw text, ``calls``, tokens, ``cost_usd``, ``cached``...)
    appear when they apply.
    """

    type: str
    """The assertion type (``contains``, ``llm_judge``...); ``not_run`` for a cell that was not run."""
    name: str | None
    """The assertion's ``name:`` from the config, if it has one."""
    passed: bool | None
    """True held, False did not hold, None inconclusive (e.g. no judge) or broken (see ``error``)."""
    score: float
    """0..1, rounded to 6 places; feeds the cell's weighted score."""
    reason: str
    """Why, in words (``expected 'refund'``, the judge's reasoning...)."""
    weight: float
    """The assertion's weight in the cell's weighted score (``weight:``, default 1)."""


class ToolCallRecord(TypedDict):
    """One tool call the target made, in order."""

    name: str
    args: Any
    """The arguments, as the target gave them (usually a mapping)."""
    result: Any
    """What the tool returned, when the target reported it."""


class UsageRecord(TypedDict):
    """Tokens the target used for the cell."""

    input_tokens: int
    output_tokens: int
    cache_hit_tokens: int
    """Input tokens served from the provider's prompt cache."""


class CellOutput(TypedDict, total=False):
    """What the target produced (its trajectory); empty (``{}``) for a cell that was not run."""

    text: str
    """The final answer text."""
    tool_calls: list[ToolCallRecord]
    usage: UsageRecord
    iterations: int | None
    """Agent loop iterations, when the target reports them (engines)."""
    events: list[Any]
    """The raw stream events an engine sent (up to ``max_events``)."""
    events_truncated: bool
    """True when the target dropped events past ``max_events``."""
    latency_ms: float | None
    ttft_ms: float | None
    cost_usd: float | None
    error: str | None
    """The target's error, as in ``CellResult.error``."""
    request: Any
    """The rendered request sent (provider / engine), secrets removed."""
    raw: Any
    """Anything else the target returned."""
    printed: str
    """What a Python target printed through ``sys.stdout``/``sys.stderr`` during the call, in order
    (up to 64 Ki characters, then a count of what was not kept); absent when it printed nothing. For a
    call that raised, the printed text is in the cell's ``traceback`` instead."""
    stop_reason: str
    """Why the model stopped, as the target reported it (absent when it did not); as ``CellResult.stop_reason``."""
    cost_note: str
    """Why ``cost_usd`` is None although a price is known; as ``CellResult.cost_note``."""


class _CellResultKeys(TypedDict):
    """The keys every ``results.jsonl`` line has, in the order they are written."""

    version: int
    """The results format the cell was read from (:data:`RESULT_VERSION`; 1 in files of an older evalx); first, so a reader can tell."""
    run_id: str
    """The run's id (``YYYYMMDD-HHMMSS-<6 hex>``)."""
    index: int
    """The cell's position in matrix order (case, target, repeat); the file is in this order once the run ends."""
    target: str
    """The target's id (a matrix variant's id, ``base[param=value]``, in a ``--matrix`` run)."""
    target_type: str
    """The target's kind: ``python``, ``engine``, ``provider``..."""
    dataset: str
    """The dataset's id."""
    case_id: str
    """The case's id within its dataset."""
    repeat: int
    """Which repeat of the case this is, from 0."""
    category: str
    """The case's category (``general`` unless set)."""
    difficulty: str | None
    """The case's difficulty, if set."""
    tags: list[str]
    """The case's tags."""
    case_source: str
    """Where the case was read: ``file:line``."""
    input: Any
    """The case's input, as in the dataset (secrets masked)."""
    expected: Any
    """The case's expected value, if any."""
    status: Status
    """``pass`` every assertion held · ``fail`` a conclusive assertion failed (or the weighted score is under the
    case threshold) · ``error`` the target broke, or an assertion could not be evaluated · ``skipped`` nothing failed
    but something was inconclusive, or the cell was not run (``skip_reason``)."""
    score: float | None
    """The weighted score of the conclusive assertions (0..1, 6 places); None when none was conclusive or the target errored."""
    assertions: list[AssertionRecord]
    """Every assertion's verdict, in config order (global ``assert:`` first); empty when the target errored."""
    output: CellOutput
    """The target's trajectory (without its traceback, which is ``traceback``, and ``cached``)."""
    latency_ms: float | None
    """Wall time of the target call in ms (the target's own figure when it reports one); None if not run."""
    ttft_ms: float | None
    """Time to first token in ms (streaming engines and providers)."""
    cost_usd: float | None
    """What the target call cost, when priced; None when not priced (the summary counts unpriced provider cells)."""
    judge_cost_usd: float | None
    """What the model-graded assertions' judge calls cost, summed; None when there were none or unpriced."""
    cached: bool
    """True when the output came from evalx's response cache (``run.cache``), not a fresh call."""
    error: str | None
    """Why the target failed (one line: a timeout, an HTTP error, an exception); None when it answered."""
    traceback: str | None
    """A Python target's traceback when it raised."""
    started_at: str | None
    """When the cell started (ISO 8601, UTC, ms); None when it was not run."""


class CellResult(_CellResultKeys, total=False):
    """One line of ``results.jsonl``: one case run against one target, one repeat.

    Every key of :class:`_CellResultKeys` (above, in the order written) and,
    only on a cell that was not run, ``skip_reason``; ``description`` and
    ``notes`` only when the case has them. Readers should still
    treat a line from an older evalx (or edited by hand) with care: ``.get``
    and a type check before use.
    """

    skip_reason: str
    """Only on a cell that was not run: why (the cost guard stopped the run)."""
    trace: TraceRecord
    """Only in a traced run (``tracing: {receive: true}``, docs/tracing.md): the cell's trace id, its spans, and
    whether its tool calls and usage came from them (``source``)."""
    description: str
    """Only when the case has one: its ``description:``, as written (JUnit ``system-out``, the HTML report)."""
    notes: str
    """Only when the case has them: its ``notes:``, as written (JUnit ``system-out``, the HTML report)."""
    context: str | list[str]
    """Only when the case has one: its ``context`` (the passages a grounded answer is checked against; the HTML report)."""
    stop_reason: str
    """Only when the target reported why the model stopped: its words, as given (``stop``, ``end_turn``,
    ``tool_calls``; ``length`` / ``max_tokens``: the answer was cut off at the token limit)."""
    truncated: bool
    """Only on a cell whose answer was cut off (``stop_reason`` is ``length``, ``max_tokens``,
    ``max_output_tokens``, ``model_length`` or ``token_limit``, in any case): ``true``. The
    ``not_truncated`` assertion fails such a cell."""
    turns: list[TurnRecord]
    """Only on a conversation (a case with ``turns:``): each turn run, in order, as
    ``{input, output, latency_ms, usage, tool_calls, assertions}`` (``output`` the turn's trajectory,
    ``assertions`` the turn's own, each with ``turn``). A turn that errored is the last one. In a
    simulation a turn whose user message the user target wrote also has ``user: {latency_ms, usage, cost_usd}``."""
    simulation: SimulationRecord
    """Only on a simulated-user conversation (a case with ``simulate:``): ``{target, turns, stopped_by,
    max_turns, user_usage, user_cost_usd}``; ``stopped_by`` is ``regex``, ``tool``, ``user_done``,
    ``max_turns`` or ``error``. The user target's cost is not in the cell's ``cost_usd``."""
    review: CellReview
    """Never in ``results.jsonl``: added when the cell is read and its run's ``reviews.jsonl`` marks it
    (:mod:`evalx.results.reviews`): ``{verdict, comment, reviewer, at, original_status}``; ``status`` is then the verdict."""
    cost_note: str
    """Only when ``cost_usd`` is None although the model has a price: why (``no usage in response``).
    Such a cell is never counted as free: the summary counts it in ``cost_missing_cells`` and the cost
    guard counts it at the mean cost of the priced cells."""
    rate_limits: CellRateLimits
    """Only on a cell whose calls met a provider's rate limit (a 429, or a wait for the endpoint limiter of a definition
    with ``rate_limits:`` or of adaptive concurrency): ``{responses_429, wait_s, concurrency}``, its judge's and
    simulated users' calls included."""
    pairwise: list[PairwiseRecord]
    """Only on a cell of a case with a ``pairwise`` assertion, in a run of two or more targets: one record per
    comparison with another target's cell (the same record on both cells; :mod:`evalx.execution.pairwise_pass`):
    ``{against, a, b, dataset, case_id, repeat, name, criterion, cells, winner, position_tie, orders,
    length_a, length_b, length_diff, longer_won, error, calls, input_tokens, output_tokens, cached, cost_usd,
    judge}``, or ``{..., winner: null, not_compared: WHY}``. It never changes the cell's status; its judge
    cost is not in the cell's ``judge_cost_usd`` (the summary counts it once per pair)."""


class CellRateLimits(TypedDict):
    """What a cell's provider calls met at the rate limit (``rate_limits``; :mod:`evalx.targets.transport.pacing`)."""

    responses_429: int
    """Answers that said the provider was at its limit (429, 529, overloaded): each waited out, or retried."""
    wait_s: float
    """Seconds the calls waited for a slot (pacing, the pause after a 429, the adaptive window): not the cell's time."""
    concurrency: int
    """The most requests of the cell's target in flight when one of its calls got a slot."""


class _CellReviewKeys(TypedDict):
    verdict: str
    """``pass`` or ``fail``: the cell's ``status`` as read."""
    comment: str
    reviewer: str
    at: str
    """When the mark was made (ISO 8601, UTC)."""
    original_status: Status
    """The status the run wrote."""


class CellReview(_CellReviewKeys, total=False):
    """A reviewer's mark as a cell read with it carries it (``review``; :mod:`evalx.results.reviews`)."""

    score: float
    """The reviewer's 0-1 score: the cell's ``score`` as read."""
    original_score: float | None
    """The score the run wrote."""


class TurnUser(TypedDict):
    """What a simulated user's call for a turn took (``turns[n].user``)."""

    latency_ms: float | None
    usage: UsageRecord
    cost_usd: float | None


class _TurnRecordKeys(TypedDict):
    input: Any
    """The turn's user message."""
    output: CellOutput
    """The turn's reply (its trajectory)."""
    latency_ms: float | None
    usage: UsageRecord
    tool_calls: list[ToolCallRecord]
    assertions: list[AssertionRecord]
    """The turn's own assertions, each with ``turn``."""


class TurnRecord(_TurnRecordKeys, total=False):
    """One turn of a conversation cell (``turns``), as it ran."""

    traceback: str
    cached: bool
    """The reply came from the response cache."""
    user: TurnUser
    """A simulated conversation's: the user target's side of the turn."""


class SimulationRecord(TypedDict):
    """A simulated-user conversation's ``simulation``."""

    target: str
    turns: int
    stopped_by: str
    """``regex``, ``tool``, ``user_done``, ``max_turns`` or ``error``."""
    max_turns: int
    user_usage: UsageRecord
    user_cost_usd: float | None


class PairwiseOrder(TypedDict, total=False):
    """One of the two orders a pair of outputs was shown to the judge in (``orders``)."""

    first: str
    """The target whose output was shown as Output A."""
    said: str | None
    """``A``, ``B`` or ``tie`` as the judge answered; None when its reply could not be read."""
    prefers: str | None
    """The target that answer prefers, or ``tie``."""
    reason: str
    reply: str | None
    """The judge's raw reply."""
    error: str


class _PairwiseRecordKeys(TypedDict):
    name: str | None
    """The assertion's ``name``."""
    criterion: str
    """What the outputs were compared on: the assertion's ``rubric``, or the default one."""
    a: str
    b: str
    repeat: int
    cells: list[int | None]
    """The indexes of A's and B's cells (None for a side without one)."""
    winner: str | None
    """A's or B's target, ``tie``, or None (not compared, or an error)."""


class PairwiseRecord(_PairwiseRecordKeys, total=False):
    """One comparison of two targets' cells of a case by a ``pairwise`` judge (:mod:`evalx.judge.pairwise`)."""

    against: str
    """On a cell: the other side's target."""
    dataset: str
    case_id: str
    not_compared: str
    """Why the pair was not compared (a side errored or was not run, the cost guard...): then nothing below."""
    position_tie: bool
    """The two orders disagreed (position bias): the winner is ``tie``."""
    orders: list[PairwiseOrder]
    length_a: int
    length_b: int
    length_diff: int
    longer_won: bool | None
    error: str | None
    calls: int
    input_tokens: int
    output_tokens: int
    cached: bool
    cost_usd: float | None
    judge: str


def not_run(reason: str) -> AssertionRecord:
    """The one assertion of a cell that was not run, saying why."""
    return {"type": "not_run", "name": None, "passed": None, "score": 0.0, "reason": reason, "weight": 1.0}


def cell_result(
    run_id: str,
    index: int,
    target: str,
    target_type: str,
    case: Case,
    dataset: str,
    repeat: int,
    status: Status,
    score: float | None,
    assertions: list[AssertionRecord],
    output: CellOutput,
    latency_ms: float | None = None,
    ttft_ms: float | None = None,
    cost_usd: float | None = None,
    judge_cost_usd: float | None = None,
    cached: bool = False,
    error: str | None = None,
    traceback: str | None = None,
    started_at: str | None = None,
    skip_reason: str | None = None,
    rate_limits: CellRateLimits | None = None,
) -> CellResult:
    """A cell's result, whatever its status: the one place a ``results.jsonl`` line is built.

    ``case`` is the :class:`evalx.models.Case` the cell ran; its fields are
    taken as they are (no copy: the line is encoded straight away). Positional
    parameters and one dict literal: this runs for every cell.
    """
    result: CellResult = {
        "version": RESULT_VERSION,
        "run_id": run_id,
        "index": index,
        "target": target,
        "target_type": target_type,
        "dataset": dataset,
        "case_id": case.id,
        "repeat": repeat,
        "category": case.category,
        "difficulty": case.difficulty,
        "tags": case.tags,
        "case_source": case.source,
        "input": case.input,
        "expected": case.expected,
        "status": status,
        "score": None if score is None else round(score, 6),
        "assertions": assertions,
        "output": output,
        "latency_ms": latency_ms,
        "ttft_ms": ttft_ms,
        "cost_usd": cost_usd,
        "judge_cost_usd": judge_cost_usd,
        "cached": cached,
        "error": error,
        "traceback": traceback,
        "started_at": started_at,
    }
    if skip_reason is not None:
        result["skip_reason"] = skip_reason
    if case.description is not None:
        result["description"] = case.description
    if case.notes is not None:
        result["notes"] = case.notes
    if case.context is not None:
        result["context"] = case.context
    if output:
        stop = output.get("stop_reason")
        if stop is not None:
            result["stop_reason"] = stop
            if is_truncated(stop):
                result["truncated"] = True
        note = output.get("cost_note")
        if note is not None:
            result["cost_note"] = note
    if rate_limits is not None:
        result["rate_limits"] = rate_limits
    return result


def _label(assertion: AssertionRecord) -> str:
    kind = str(assertion.get("type") or "assertion")
    name = assertion.get("name")
    label = f"{kind} ({name})" if name else kind
    turn = assertion.get("turn")
    return f"turn {turn}: {label}" if turn is not None else label  # a conversation's check of one turn's reply


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def failure_reason(result: CellResult, status: str | None = None) -> str:
    """The one line that says why a cell failed or errored: its error, or its first failing assertion.

    ``status`` overrides the result's own (the summary reads an unknown
    status as ``error``). Used by the summary's failure list, ``evalx
    compare`` and ``evalx capture``, so all three say the same thing.
    """
    status = status if status is not None else result.get("status")
    review = result.get("review")
    if isinstance(review, dict) and review.get("verdict") == "fail" and status == "fail":  # a reviewer's verdict: their words
        comment = str(review.get("comment") or "").strip()
        return f"reviewed as fail by {review.get('reviewer') or 'a reviewer'}" + (f": {comment}" if comment else "")
    assertions = [a for a in result.get("assertions") or [] if isinstance(a, dict)]
    if status == "error":
        output = result.get("output")
        error = result.get("error") or (output.get("error") if isinstance(output, dict) else None)
        if error:
            return str(error)
        for assertion in assertions:  # the target answered; grading broke
            if assertion.get("error"):
                return f"{_label(assertion)}: could not be evaluated: {assertion.get('error')}"
        return "the target failed"
    for assertion in assertions:
        if assertion.get("passed") is False:
            reason = assertion.get("reason") or assertion.get("error")
            return f"{_label(assertion)}: {reason}" if reason else f"{_label(assertion)} did not hold"
    score = _number(result.get("score"))
    return f"score {score:.3f} is below the case threshold" if score is not None else "failed"


# ---------------------------------------------------------------- summary.json: figures

#: cells by status in a group; ``pass_rate`` = pass / (cells − skipped), None when nothing was decided;
#: ``pass_rate_ci`` its 95% Wilson interval [lo, hi]
CellCounts = TypedDict(
    "CellCounts",
    {
        "cells": int,
        "pass": int,
        "fail": int,
        "error": int,
        "skipped": int,
        "pass_rate": float | None,
        "pass_rate_ci": list[float] | None,
    },
)

#: case-level verdicts in a group: one per (target, case) by ``repeat_pass_rule``; ``flaky`` cases passed some
#: repeats, not all; ``pass_rate`` = passing cases / decided cases, with its 95% Wilson interval
CaseCounts = TypedDict(
    "CaseCounts",
    {
        "cases": int,
        "pass": int,
        "fail": int,
        "error": int,
        "skipped": int,
        "flaky": int,
        "pass_rate": float | None,
        "pass_rate_ci": list[float] | None,
    },
)


class MeanP95(TypedDict):
    """A figure's mean and 95th percentile over a group's cells that have it (None: no cell had it)."""

    mean: float | None
    p95: float | None


class OutputSizes(TypedDict):
    """How much a group's cells produced, and how long they took: do "hard" cases really answer at more length?"""

    output_tokens: MeanP95
    """Over the cells whose answer reported its usage."""
    output_chars: MeanP95
    """Characters of the final answer's text, over the cells that answered."""
    latency_ms: MeanP95


class _GroupFiguresKeys(CellCounts):
    case_level: CaseCounts
    mean_score: float | None
    """Mean of the cells' weighted ``score`` (0..1) over the cells that have one (``scored_cells``): errored cells
    and cells with no conclusive assertion have none. None when no cell was scored."""
    scored_cells: int
    """Cells that have a ``score``: what ``mean_score`` averages."""


class GroupFigures(_GroupFiguresKeys, total=False):
    """A group's cell counts (``totals``, a target, a category, a difficulty), its case-level verdicts and mean score."""

    outputs: OutputSizes
    """In the category and difficulty breakdowns only (``totals`` and ``per_target`` have fuller figures of their own)."""


class CategoryDifficultyFigures(GroupFigures):
    """One target's cells of one category and one difficulty (an item of ``per_category_difficulty``)."""

    category: str
    difficulty: str | None
    """None for the category's cases that have no difficulty."""


class Distribution(TypedDict):
    """Percentiles of a figure over cells (ms for latency, USD for cost); None when no cell had it."""

    p50: float | None
    p95: float | None
    p99: float | None
    mean: float | None
    total: float | None


class CostDistribution(Distribution):
    """The spread of the cost over priced cells."""

    cells: int
    """How many cells were priced."""


class Tokens(TypedDict):
    """Tokens summed over cells."""

    input: int
    output: int
    cache_hit: int
    """Input tokens served from a provider's prompt cache."""


class _TargetFiguresKeys(GroupFigures):
    """Every target's figures (``per_target.<id>``): see :class:`TargetFigures`."""

    latency_ms: Distribution
    ttft_ms: Distribution
    tokens: Tokens
    cache_hit_ratio: float | None
    """Prompt-cache tokens as a share of input tokens."""
    cost_usd: float | None
    """Total cost of the priced cells; None when none was priced."""
    cost_usd_stats: CostDistribution
    cost_per_pass_usd: float | None
    """``cost_usd`` divided by the passing cells: what a pass costs (None without a priced cell or a pass;
    unpriced cells, ``cost_missing_cells``, are not in it)."""
    cost_missing_cells: int
    """Cells of a priced resource evalx could not price (no price known for the model, or no usage in the answer)."""
    usage_unknown_cells: int
    """Cells whose answer reported no usage (a stream without it, a priced answer without it): their tokens are not counted."""
    truncated_cells: int
    """Cells whose answer was cut off at the token limit (``truncated`` in the cell result)."""
    judge_cost_usd: float | None
    """What the judge cost for this target's cells, apart from ``cost_usd``."""
    cached_cells: int
    """Cells answered from evalx's response cache."""
    batched_cells: int
    """Cells answered from the provider's batch API: their ``cost_usd`` is at its batch price (docs/providers.md#batch-mode)."""
    per_category: dict[str, GroupFigures]
    """This target's cells by category, in matrix order (the top-level ``per_category`` pools all targets)."""
    per_difficulty: dict[str, GroupFigures]
    """This target's cells by difficulty, in matrix order; cases without a difficulty are not in it."""
    per_category_difficulty: list[CategoryDifficultyFigures]
    """This target's cells by category and difficulty (a category × difficulty table), categories in
    matrix order and difficulties in matrix order within each; cases without a difficulty have ``difficulty`` None."""


class TargetFigures(_TargetFiguresKeys, total=False):
    """One target's figures (``per_target.<id>``): every key of the class above and, only when a cell met a
    provider's rate limit, ``rate_limits``."""

    rate_limits: RateLimitFigures
    """What the provider's rate limit cost this target's cells (summed from their ``rate_limits``)."""


class RateLimitFigures(TypedDict):
    """What a target's cells met at the provider's rate limit (``per_target.<id>.rate_limits``), summed from their ``rate_limits``."""

    responses_429: int
    """Answers that said the provider was at its limit (429, 529, overloaded), all waited out or retried."""
    wait_s: float
    """Seconds the cells' calls waited for the rate limit in all (not counted in their latency or timeout)."""
    max_concurrency: int
    """The most requests of this target in flight at once."""


class MatrixVariant(TypedDict):
    """One variant of a ``--matrix`` run."""

    id: str
    """The variant's target id, ``base[param=value,...]``."""
    target: str
    """The base target's id."""
    values: JSONObject
    """The parameter values of this variant."""


class MatrixInfo(TypedDict):
    """A ``--matrix`` run's variants, as planned."""

    variants: list[MatrixVariant]


class _PairwiseRowKeys(TypedDict):
    """Two targets compared over the cases both graded: a 2×2 table of case verdicts, a McNemar test and a verdict.

    A case is *comparable* when both targets' case verdicts (by ``repeat_pass_rule``) are ``pass`` or
    ``fail``; an ``error`` or ``skipped`` verdict on either side (or a case one side did not run) makes
    it not comparable, so a target that errored never "loses" on it. ``only_a`` is A's wins (cases
    only A passed), ``only_b`` B's wins, ``ties`` the cases both passed or both failed.
    """

    a: str
    b: str
    comparable: int
    """Cases both targets graded (pass or fail on both sides): every figure below is computed on these."""
    not_comparable: int
    """Cases either target ran that are not comparable: an error, an inconclusive (skipped) verdict or no cell on one side."""
    both_pass: int
    only_a: int
    """Cases only A passed: A's wins."""
    only_b: int
    """Cases only B passed: B's wins."""
    both_fail: int
    ties: int
    """``both_pass + both_fail``."""
    pass_rate_a: float | None
    """A's pass rate over the comparable cases; None when there are none."""
    pass_rate_b: float | None
    difference: float | None
    """``pass_rate_a − pass_rate_b`` over the comparable cases (−1..1); None when there are none."""
    difference_ci: list[float] | None
    """Paired 95% interval of ``difference`` (Newcombe 1998, method 10) [lo, hi]; unadjusted for multiple comparisons."""
    p_value: float | None
    """Exact McNemar test on ``only_a`` vs ``only_b``, unadjusted; None when nothing is comparable."""
    p_adjusted: float | None
    """``p_value`` adjusted for the number of pairs (see ``adjustment``); the verdict uses it."""
    adjustment: str
    """``holm`` (Holm's step-down over ``family`` pairs), ``none`` (one pair) or ``bonferroni`` (more pairs than listed)."""
    family: int
    """How many pairs the adjustment covers: the pairs with at least one comparable case."""
    significant: bool
    """``p_adjusted`` < 0.05."""
    winner: str | None
    conclusion: str
    """The verdict in plain words: ``B beats A``, ``no clear difference`` or ``not comparable``."""


class PairwiseRow(_PairwiseRowKeys, total=False):
    """Two targets compared over the cases both graded (every key of the class above); with ``pairwise``, the judge's preference."""

    judge_preference: JudgePreference
    """Only when the run has ``pairwise`` assertions: what the judge preferred, asked about each pair of cells in both orders."""


class JudgePreference(TypedDict):
    """A ``pairwise`` judge's preferences between two targets (:mod:`evalx.results.preferences`).

    Each pair of cells (a case, a repeat) is asked in both orders; answers that
    disagree (position bias) make a tie. ``wins_a + wins_b + ties + errors == compared``.
    """

    compared: int
    """Pairs of cells the judge was asked about (twice each)."""
    wins_a: int
    wins_b: int
    ties: int
    """Both orders said tie, or they disagreed (``position_ties``)."""
    position_ties: int
    """Ties because the two orders' answers disagreed: the judge followed the position, not the content."""
    errors: int
    """An unreadable reply or a failed call in either order: no winner (the raw replies are on the cells)."""
    not_compared: int
    """Pairs not asked: a cell errored or was not run on either side, or the cost guard stopped the judging."""
    longer_won: int
    """Of ``length_decided``, the pairs won by the longer output."""
    length_decided: int
    """Pairs with a winner whose outputs differ in length."""
    longer_won_share: float | None
    """``longer_won / length_decided`` (verbosity bias when well above 0.5 on outputs of like quality); None when 0."""
    calls: int
    cost_usd: float | None


class JudgeDisagreement(TypedDict):
    """A cell where a deterministic check and a judge check that share a ``name:`` disagree: a case to read by hand."""

    target: str
    dataset: str | None
    case_id: str | None
    repeat: int
    name: str
    function: bool
    """The deterministic checks' verdict (all of that name passed)."""
    judge: bool
    """The judge checks' verdict (all of that name passed)."""
    function_types: list[str]
    judge_types: list[str]
    reason: str
    """The failing side's first reason."""


class JudgeDisagreements(TypedDict):
    """Judge vs function: pairs of checks linked by a shared ``name:`` (one deterministic, one model-graded)."""

    checked: int
    """(cell, name) pairs where both sides gave a verdict (an error or no verdict on either side is not counted)."""
    total: int
    """How many of those disagree."""
    rows: list[JudgeDisagreement]
    """The first 100 in matrix order."""


class JudgeUsage(TypedDict):
    """The model-graded assertions' judge usage (its cost is ``judge_cost_usd``)."""

    calls: int
    input_tokens: int
    output_tokens: int
    cached_calls: int
    """Judge calls answered from evalx's response cache."""


class RepeatFigures(TypedDict):
    """One target's repeat statistics over its decided cases."""

    cases: int
    k: int
    """The repeat count every case reached: each estimate is defined for it."""
    pass_at_1: float | None
    pass_at_k: float | None
    """Chance that at least one of k runs passes (unbiased estimator)."""
    pass_hat_k: float | None
    """pass^k: chance that all k runs pass."""
    flaky_cases: int


class FlakyCase(TypedDict):
    """A case that passed some repeats, not all."""

    target: str
    dataset: str
    case_id: str
    passed: int
    runs: int
    """Decided repeats (skipped excluded)."""
    status: str
    """The case's verdict by ``repeat_pass_rule``."""


class CaseRow(TypedDict):
    """One case's repeats against one target."""

    target: str
    dataset: str
    case_id: str
    runs: int
    passed: int
    failed: int
    errored: int
    skipped: int
    status: str
    """The case's verdict by ``repeat_pass_rule``."""
    flaky: bool
    pass_at_k: float | None
    pass_hat_k: float | None


class FlakyTurn(TypedDict):
    """A turn of a conversation that passed in some repeats and failed in others."""

    target: str
    dataset: str
    case_id: str
    turn: int
    """1-based."""
    passed: int
    runs: int
    """Repeats that decided the turn (reached it, and it had checks or errored)."""


class _RepeatsSummaryKeys(TypedDict):
    runs_per_case: int
    repeat_pass_rule: str
    per_target: dict[str, RepeatFigures]
    flaky_cases: int
    flaky: list[FlakyCase]
    """The first 50 flaky cases."""
    cases: list[CaseRow]
    """The first 1,000 cases (in matrix order)."""
    cases_total: int


class RepeatsSummary(_RepeatsSummaryKeys, total=False):
    """Repeat statistics, when the run repeated its cases."""

    flaky_turns: list[FlakyTurn]
    """Only when the run has conversations: their flaky turns (the first 50, in matrix order)."""
    flaky_turns_total: int


class FailureRow(TypedDict):
    """A failing or erroring cell in ``failures``."""

    target: str
    dataset: str
    case_id: str
    repeat: int
    category: str
    status: str
    """``fail`` or ``error``."""
    reason: str
    """:func:`failure_reason` of the cell."""


class SlowCell(TypedDict):
    """One of the slowest cells, in ``slowest.cells``."""

    target: str
    dataset: str
    case_id: str
    repeat: int
    status: str
    latency_ms: float


class Slowest(TypedDict):
    """The slowest cells: the 5 slowest, and with ``defaults.slow_ms`` every cell over it (at most 20 listed)."""

    threshold_ms: float | None
    """``defaults.slow_ms``, or None."""
    over_threshold: int | None
    """Cells slower than the threshold (None without one)."""
    cells: list[SlowCell]
    """Slowest first."""


class ErrorGroup(TypedDict):
    """An error that several cells of one target share, word for word, in ``error_groups``."""

    target: str
    reason: str
    """:func:`failure_reason` of the cells (their error)."""
    count: int
    """How many cells of the run errored so (two or more)."""


# ---------------------------------------------------------------- summary.json: what the run adds


class CostGuardReport(TypedDict):
    """The cost guard (``defaults.max_total_cost``): its limit, what was spent, and what it stopped."""

    limit_usd: float
    spent_usd: float
    skipped: int
    """Cells not started because the limit was reached (each is a ``skipped`` result with ``skip_reason``)."""
    message: str | None
    """What the run said when the guard tripped; None when it did not."""


class ShardReport(TypedDict):
    """A shard run (``evalx run --shard I/N``): which shard it is; its gates are applied by ``evalx merge``."""

    index: int
    """The shard's number, 1-based."""
    count: int
    """How many shards the plan was split into."""
    plan_cells: int
    """The cells of the whole plan (every shard)."""


class _MergeReportKeys(TypedDict):
    """A run made by ``evalx merge`` of shard runs (the keys every merge writes)."""

    count: int
    """How many shards the plan was split into."""
    shards: list[JSONObject]
    """The shards merged, in order: ``{index, run_id, path}``."""
    partial: bool
    """True when shards were missing (``--allow-partial``): the run holds only the cells of those merged."""
    missing: list[int]
    """The numbers of the missing shards (empty unless partial)."""


class MergeReport(_MergeReportKeys, total=False):
    """A run made by ``evalx merge`` of shard runs."""

    missing_cells: int
    """Planned cells that no merged shard holds (a shard that had not finished, or missing shards): the merge is
    ``complete``, and may be a baseline's ``latest``, only when this is 0 (written since issue 30)."""


class Metric(TypedDict):
    """One figure in a baseline run (``a``) and this run (``b``): ``delta`` = b − a, ``relative`` = delta / |a|."""

    a: float | None
    b: float | None
    delta: float | None
    relative: float | None


class RunHeader(TypedDict):
    """Which run a side of a comparison is."""

    run_id: str
    path: str
    name: str | None
    started_at: str | None


class TargetDelta(TypedDict):
    """One target's figures compared between the two runs."""

    in_a: bool
    in_b: bool
    cells_compared: int
    """Cells of this target both runs have (same dataset, case and repeat): the figures are computed on these."""
    pass_rate: Metric
    cost_usd: Metric
    p50_ms: Metric
    p99_ms: Metric
    tokens_input: Metric
    tokens_output: Metric


class CaseChange(TypedDict):
    """A case whose verdict changed between the runs (newly failing or newly passing)."""

    target: str
    dataset: str
    case_id: str
    category: str
    status: str
    """The case's verdict in the new run."""
    passed: int
    runs: int
    reason: str | None
    """Why it fails now (newly failing), or why it failed before (newly passing)."""
    was: str
    """The case's verdict in the baseline."""


class FlakyChange(TypedDict):
    """A repeated case that became flaky, or stopped being flaky."""

    target: str
    dataset: str
    case_id: str
    category: str
    status: str
    passed: int
    runs: int
    reason: str | None
    was_flaky: bool
    now_flaky: bool
    was_passed: int
    was_runs: int


class Comparison(TypedDict):
    """This run compared with a baseline run (``--baseline`` / ``gates.baseline``); what ``evalx compare`` shows."""

    a: RunHeader
    """The baseline."""
    b: RunHeader
    """This run."""
    overall: dict[str, Metric]
    """``pass_rate``, ``cost_usd``, ``p50_ms``, ``p99_ms``, ``tokens_input``, ``tokens_output``."""
    per_target: dict[str, TargetDelta]
    per_category: dict[str, dict[str, Metric]]
    """``{category: {pass_rate: Metric}}`` for categories in both runs."""
    newly_failing: list[CaseChange]
    newly_failing_total: int
    newly_passing: list[CaseChange]
    newly_passing_total: int
    flaky_changed: list[FlakyChange]
    flaky_changed_total: int
    new_cases: int
    new_cases_failing: int
    removed_cases: int
    cells_compared: int
    """Cells both runs have (target, dataset, case, repeat): every figure and change above is computed on these."""
    cells_only_in_baseline: int
    """Cells the baseline ran and this run did not (another selection): not compared."""
    cells_only_in_run: int
    """Cells this run ran and the baseline did not: not compared."""


class BaselineView(TypedDict):
    """What the reports show of the baseline: its headline figures and the case changes."""

    run_id: str
    pass_rate: float | None
    cost_usd: float | None
    p99_ms: float | None
    newly_failing: list[CaseChange]
    newly_passing: list[CaseChange]


class GateResult(TypedDict):
    """One gate checked on one scope."""

    gate: str
    """``min_pass_rate``, ``max_pass_rate_drop``, ``no_new_failures``, ``max_cost_increase``, ``max_p99_increase`` or ``max_skipped_rate``."""
    scope: str
    """``target <id>`` or ``category <name>``."""
    value: float | None
    threshold: float | dict[str, float]
    """As configured: a number, or ``{ratio, min_ms}`` / ``{ratio, min_usd}`` for the latency and cost gates."""
    held: bool | None
    """False: breached (exit 1); None: n/a (no baseline, no decided cells...)."""
    detail: str


class GateReport(TypedDict):
    """The ``gates:`` of the config, evaluated: when ``active``, they decide the exit status."""

    active: bool
    baseline: str | None
    """The baseline run's id, when there was one."""
    baseline_ref: str | None
    """What named it (``latest``, a run id, a path)."""
    warnings: list[str]
    results: list[GateResult]
    breached: int
    passed: bool


class ReviewCounts(TypedDict, total=False):
    """``summary.json``'s ``reviews``: what the run's review marks did to its figures."""

    reviewed_cells: int
    """Cells with a review mark; each counts with the reviewed verdict."""
    overridden_cells: int
    """Of those, cells whose reviewed verdict differs from the status the run gave them."""
    marks: int
    """Readable lines of ``reviews.jsonl`` when the summary was written (an older count: the summary predates a mark)."""


class SummaryFigures(TypedDict):
    """What :class:`evalx.results.summary.SummaryBuilder` aggregates from the results: ``summary.json``'s first keys."""

    version: int
    """:data:`SUMMARY_VERSION`."""
    run_id: str
    name: str
    """The config's ``name:``."""
    started_at: str
    finished_at: str
    duration_s: float
    """First cell started to last result written, in seconds."""
    repeat_pass_rule: str
    """``all``, ``majority`` or ``any``: the rule the case-level verdicts used."""
    totals: GroupFigures
    """Every cell of the run. With several targets (or matrix variants) this pools different models: a
    report's headline is per target (``per_target``); a pooled rate is at most a footnote."""
    per_target: dict[str, TargetFigures]
    """Targets in matrix order."""
    per_category: dict[str, GroupFigures]
    """All targets pooled, by category; per target: ``per_target.<id>.per_category``."""
    per_difficulty: dict[str, GroupFigures]
    """All targets pooled, by difficulty; per target: ``per_target.<id>.per_difficulty``."""
    matrix: MatrixInfo | None
    """A ``--matrix`` run's variants; None otherwise."""
    pairwise: list[PairwiseRow]
    """Every pair of targets, in target order (empty with one target)."""
    latency_ms: Distribution
    ttft_ms: Distribution
    tokens: Tokens
    cache_hit_ratio: float | None
    cost_usd: float | None
    cost_missing_cells: int
    usage_unknown_cells: int
    """Cells whose answer reported no usage, all targets."""
    truncated_cells: int
    """Cells whose answer was cut off at the token limit, all targets."""
    judge_cost_usd: float | None
    cached_cells: int
    batched_cells: int
    """Cells answered from a provider's batch API, all targets: their cost is at the batch price."""
    response_cache_hit_ratio: float | None
    """Cells from evalx's response cache as a share of all cells."""
    inconclusive_assertions: int
    """Assertions with no verdict (not failures), e.g. model-graded ones without a judge."""
    inconclusive_reasons: dict[str, int]
    """Why, with counts, most frequent first (at most 20 distinct reasons)."""
    judge: JudgeUsage
    repeats: RepeatsSummary | None
    """None without repeats."""
    failures: list[FailureRow]
    """The first 200 failing or erroring cells in matrix order."""
    failures_total: int
    slowest: Slowest
    """The slowest cells (``defaults.slow_ms`` flags those over it)."""
    error_groups: list[ErrorGroup]
    """Errors that several cells of one target share word for word: the count of each, most frequent first (at most 50).

    Reports list such an error once, with its count, instead of once a cell (:func:`evalx.results.summary.listed_failures`).
    """
    judge_disagreements: JudgeDisagreements
    """Cells where a deterministic check and a judge check sharing a ``name:`` disagree (empty when none share one)."""


class RunSummary(SummaryFigures, total=False):
    """``summary.json``: the figures (:class:`SummaryFigures`), then what only the run knew.

    A run writes ``config``, ``interrupted`` and ``cells_planned`` always, and
    ``cost_guard``, ``comparison``, ``baseline`` and ``gates`` when they apply;
    a summary rebuilt from results alone (``evalx compare`` of a killed run)
    has none of them. Built in one place: :func:`evalx.results.outcome.finish_summary`.
    """

    config: str
    """The config file the run used."""
    interrupted: bool
    """True when the run was interrupted (Ctrl-C, SIGTERM): it exits 3."""
    cells_planned: int
    """Cells the run planned (a killed or interrupted run has fewer results)."""
    stopped_early: str
    """Only when ``--max-failures N`` (``-x``) stopped the run before its last cells: why, and the resume command. It exits 1."""
    cost_guard: CostGuardReport
    """Only with ``defaults.max_total_cost``."""
    comparison: Comparison
    """Only with a baseline."""
    baseline: BaselineView
    """Only with a baseline."""
    gates: GateReport
    """Only when ``gates:`` sets a gate."""
    unreadable_lines: list[int]
    """Only when ``results.jsonl`` has lines evalx could not read (damaged, torn, not a result): their line numbers.

    Those cells are missing from the figures (``evalx report`` / ``compare`` warn about them).
    """
    duplicate_cells: list[int]
    """Only when ``results.jsonl`` holds a cell more than once (two writers): the cells' indexes, each counted once (its first line)."""
    shard: ShardReport
    """Only in a shard run (``--shard I/N``): it has no gates nor baseline comparison; ``evalx merge`` applies them."""
    merged: MergeReport
    """Only in a run made by ``evalx merge``: the shards it merged, and whether any were missing."""
    reviews: ReviewCounts
    tracing: TracingReport
    """Only in a traced run (``tracing: {receive: true}``, docs/tracing.md): its cells' spans counted."""
    """Only when review marks apply (``reviews.jsonl``, :mod:`evalx.results.reviews`): how many cells they mark and override."""
