"""Spend: the cost guard (``defaults.max_total_cost``) and the ``--dry-run`` estimate.

The guard is asked before each cell starts. It counts what finished cells
spent (target ``cost_usd`` + ``judge_cost_usd``) and, so that cells in flight
are not forgotten, assumes each started-but-unfinished cell and the next one
cost the mean of the finished ones. Once that would pass the limit, no new
cell starts: the rest become ``skipped`` results saying why.

Only finite figures of 0 or more count (targets already refuse others as
the cell's protocol error; this is the last line): a NaN or a negative
figure can never switch the guard off. A cell whose cost is unknown although
its model has a price (``cost_note``: the answer had no usage) is not taken
as free: it counts at the mean of the cells whose cost is known (0 until one
is), and the guard's message says how many were estimated so.

The estimate prices each provider cell from its target's price (a target's
``pricing:`` or its provider definition's, per model) with input tokens
counted on the prompt (tiktoken for OpenAI models when installed, else about
4 characters a token: :mod:`evalx.execution.tokens`) and output tokens at the
``max_tokens`` limit — an upper bound, when a limit is set —, at the normal
price and, where the definition has a batch API, at its batch price; and the
time each target takes at its known rate limit (``rate_limit.rpm``), else
"unknown".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalx.errors import ConfigError
from evalx.execution.tokens import CHARS_PER_TOKEN, Counter, counter_for
from evalx.results.model import CellResult
from evalx.targets.settings import Overrides, resolve_settings
from evalx.targets.spec import ProviderTargetSpec, TargetSpec

if TYPE_CHECKING:
    from evalx.config.loader import Config
    from evalx.execution.plan import Plan
    from evalx.targets.definitions import Price, ProviderDefinition

__all__ = ["CHARS_PER_TOKEN", "CostEstimate", "CostGuard", "estimate_cost", "format_estimate"]
_OUTPUT_LIMIT_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "num_predict")


class CostGuard:
    """Decides whether the next cell may start under ``max_total_cost`` (USD)."""

    def __init__(self, limit: float) -> None:
        self.limit = float(limit)
        self.known = 0.0  # what the cells with a known cost spent
        self.priced = 0  # cells with a known cost (target or judge)
        self.unknown = 0  # cells of a priced model whose cost is unknown (no usage): counted at the mean
        self.finished = 0
        self.in_flight = 0
        self.skipped = 0

    @property
    def spent(self) -> float:
        """Known spend, plus each unknown-cost cell at the mean of the known ones."""
        if self.unknown and self.priced:
            return self.known + self.unknown * (self.known / self.priced)
        return self.known

    @property
    def tripped(self) -> bool:
        return self.skipped > 0

    def reason(self) -> str:
        return f"not run: spend ${self.spent:.4f}{self._estimated()} reached defaults.max_total_cost ${self.limit:.4f}"

    def _estimated(self) -> str:
        n = self.unknown
        return f" (with {n} cell{'s' if n != 1 else ''} of unknown cost counted at the mean)" if n else ""

    def admit(self, cell: Any = None) -> str | None:
        """None when the cell may start, else the reason it is skipped."""
        spent = self.spent
        per_cell = spent / self.finished if self.finished else 0.0
        projected = spent + per_cell * (self.in_flight + 1)
        if spent >= self.limit or (per_cell > 0 and projected > self.limit):
            self.skipped += 1
            return self.reason()
        self.in_flight += 1
        return None

    def record(self, result: CellResult) -> None:
        """Count a finished cell (call for every result, skipped ones included)."""
        if result.get("skip_reason"):
            return  # a cell the guard itself skipped never started
        self.in_flight = max(0, self.in_flight - 1)
        self.finished += 1
        counted = False
        for value in (result.get("cost_usd"), result.get("judge_cost_usd")):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
                self.known += float(value)
                counted = True
        if counted:
            self.priced += 1
        elif result.get("cost_note"):
            self.unknown += 1

    def over_limit(self, ahead: float = 0.0) -> str | None:
        """The reason work that is not a cell (the pairwise judge calls after the cells) may not start, or None.

        ``ahead``: what the work already started and this one are expected to cost (the caller's mean so far).
        """
        spent = self.spent
        if spent >= self.limit or (ahead > 0 and spent + ahead > self.limit):
            return f"not judged: spend ${spent:.4f}{self._estimated()} reached defaults.max_total_cost ${self.limit:.4f}"
        return None

    def spend(self, cost: Any) -> None:
        """Count spend that is not a cell's (the pairwise judge calls): a finite figure of 0 or more."""
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0:
            self.known += float(cost)

    def message(self) -> str:
        return (
            f"cost guard: spend ${self.spent:.4f}{self._estimated()} reached defaults.max_total_cost ${self.limit:.4f}; "
            f"{self.skipped} cell{'s' if self.skipped != 1 else ''} not run (skipped)"
        )


@dataclass
class TargetEstimate:
    target: str
    cells: int
    cost_usd: float | None = None
    input_tokens: int = 0
    output_tokens: int | None = 0
    note: str = ""
    #: the same at the provider's batch price (None: its definition has no batch API, or no price is known)
    batch_cost_usd: float | None = None
    #: the target runs in batch mode (``batch:`` or ``--batch``): it pays the batch price
    batched: bool = False
    #: how input tokens were counted (tiktoken's encoding, or the characters-per-token estimate); "" for a target that is not a model
    token_method: str = ""
    kind: str = "provider"
    #: the known rate limit (requests a minute), None when the target sets none
    rpm: float | None = None


@dataclass
class CostEstimate:
    targets: list[TargetEstimate] = field(default_factory=list)
    limit: float | None = None
    #: the ``pairwise`` judge calls (``cells``: the pairs of cells; two calls each, one per order), when the run has any
    pairwise: TargetEstimate | None = None

    def _all(self) -> list[TargetEstimate]:
        return [*self.targets, *([self.pairwise] if self.pairwise is not None else [])]

    @property
    def total(self) -> float | None:
        known = [t.cost_usd for t in self._all() if t.cost_usd is not None]
        return sum(known) if known else None

    @property
    def total_as_run(self) -> float | None:
        """The total with each batch-mode target at its batch price (what the run will pay)."""
        known = [t.batch_cost_usd if t.batched and t.batch_cost_usd is not None else t.cost_usd for t in self._all()]
        priced = [c for c in known if c is not None]
        return sum(priced) if priced else None

    @property
    def total_at_batch(self) -> float | None:
        """The total with every target whose provider has a batch API at its batch price (``--batch``)."""
        known = [t.batch_cost_usd if t.batch_cost_usd is not None else t.cost_usd for t in self._all()]
        priced = [c for c in known if c is not None]
        return sum(priced) if priced else None

    @property
    def complete(self) -> bool:
        return all(t.cost_usd is not None and not t.note for t in self._all())


def _text_len(value: Any) -> int:
    return len(_text(value))


def _definition_of(spec: ProviderTargetSpec, config: Config) -> ProviderDefinition | None:
    from evalx.targets.definitions import find_provider, providers_dir_of

    try:
        return find_provider(spec.provider, providers_dir_of(config))
    except (ConfigError, OSError):  # an unknown or broken provider is reported when the run starts, not by the estimate
        return None


def _price_of(spec: ProviderTargetSpec, config: Config) -> Price | None:
    from evalx.targets.definitions import Price

    if spec.pricing is not None:
        return Price.of(spec.pricing)
    definition = _definition_of(spec, config)
    return definition.price(spec.model or "") if definition is not None else None


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def estimate_cost(config: Config, plan: Plan, overrides: Overrides | None = None) -> CostEstimate:
    """What the plan would spend at most, per target, before anything runs (and how long it takes at its rate limit)."""
    estimate = CostEstimate(limit=config.typed.defaults.max_total_cost)
    for spec in plan.targets:
        cells = plan.cells_for(spec.id)
        est = TargetEstimate(spec.id, len(cells))
        estimate.targets.append(est)
        settings = resolve_settings(spec, config.typed.defaults, overrides)
        est.rpm = settings.rate_limit_rpm
        est.kind = spec.type
        if not isinstance(spec, ProviderTargetSpec):
            est.note = f"no price known for {spec.type} targets"
            est.cost_usd = None
            continue
        definition = _definition_of(spec, config)
        counter: Counter = counter_for(definition.name if definition is not None else spec.provider, str(spec.model))
        est.token_method = counter.method
        fixed = [_text(spec.system), _text(spec.prompt)]
        for cell in cells:
            est.input_tokens += counter.count("\n".join([*fixed, _text(cell.case.input), _text(cell.case.system)]))
        est.batched = settings.batch is not None and definition is not None and definition.batch is not None
        price = _price_of(spec, config)
        if price is None:
            est.note = f"no price known for {spec.provider}/{spec.model} (set pricing: on the target, or on a matrix model value)"
            est.cost_usd = None
            continue
        limit = _output_limit(spec)
        if limit is None:
            est.output_tokens = None
            est.note = "no max_tokens in params: output tokens not bounded, input only"
        else:
            est.output_tokens = limit * len(cells)
        est.cost_usd = price.cost(est.input_tokens, est.output_tokens or 0)
        if definition is not None and definition.batch is not None:
            est.batch_cost_usd = price.scaled(definition.batch.discount).cost(est.input_tokens, est.output_tokens or 0)
    estimate.pairwise = _pairwise_estimate(config, plan)
    return estimate


def _pairwise_estimate(config: Config, plan: Plan) -> TargetEstimate | None:
    """The ``pairwise`` judge calls: both orders of every pair of cells; priced when the judge is a priced provider.

    Input tokens are the prompt and the case's input (the outputs' length is
    not known before the run: bounded by the compared targets' ``max_tokens``
    when each has one); output tokens at the judge's ``max_tokens``.
    """
    from evalx.execution.pairwise_pass import count_pairs, pairwise_specs
    from evalx.judge.pairwise import PAIRWISE_PROMPT

    pairs, input_chars = count_pairs(pairwise_specs(config.typed.asserts, plan), plan)
    if not pairs:
        return None
    calls = 2 * pairs
    est = TargetEstimate("pairwise", pairs)
    ref = config.typed.judge.target
    spec: TargetSpec | None = next((t for t in config.typed.targets if t.id == ref), None) if isinstance(ref, str) else ref
    if spec is None or not isinstance(spec, ProviderTargetSpec):
        est.note = "no judge configured" if spec is None else f"no price known for {spec.type} judges"
        est.cost_usd = None
        return est
    price = _price_of(spec, config)
    if price is None:
        est.note = f"no price known for the judge {spec.provider}/{spec.model}"
        est.cost_usd = None
        return est
    limits = [_output_limit(t) for t in plan.targets]
    known = [n for n in limits if n is not None]
    per_output = max(known) if known and len(known) == len(limits) else None
    est.input_tokens = (calls * (len(PAIRWISE_PROMPT) + _text_len(spec.system)) + 2 * input_chars) // CHARS_PER_TOKEN + calls
    notes = []
    if per_output is None:
        notes.append("the compared outputs' length not counted (no max_tokens on every target)")
    else:
        est.input_tokens += calls * 2 * int(per_output)
    judge_limit = _output_limit(spec)
    if judge_limit is None:
        est.output_tokens = None
        notes.append("the judge's output not bounded (no max_tokens)")
    else:
        est.output_tokens = calls * judge_limit
    est.note = "; ".join(notes)
    est.cost_usd = price.cost(est.input_tokens, est.output_tokens or 0)
    return est


def _output_limit(spec: TargetSpec) -> int | None:
    """A provider target's ``max_tokens`` (or the like) in its ``params:``; None when it has none."""
    params = (spec.params or {}) if isinstance(spec, ProviderTargetSpec) else {}
    return next((limit for k in _OUTPUT_LIMIT_KEYS if isinstance(limit := params.get(k), int)), None)


def format_estimate(estimate: CostEstimate) -> list[str]:
    lines = ["Estimated cost (upper bound: input from the prompt, output at max_tokens; normal · batch price):"]
    for t in estimate.targets:
        if t.cost_usd is None:
            lines.append(f"  {t.target:<20} {t.cells} cells  — {t.note}")
            continue
        out = "?" if t.output_tokens is None else f"{t.output_tokens:,}"
        note = f"  ({t.note})" if t.note else ""
        batch = "no batch API" if t.batch_cost_usd is None else f"batch ≤ ${t.batch_cost_usd:.4f}" + (" (batch mode)" if t.batched else "")
        lines.append(f"  {t.target:<20} {t.cells} cells  ~{t.input_tokens:,} in · {out} out  ≤ ${t.cost_usd:.4f} · {batch}{note}")
    p = estimate.pairwise
    if p is not None:
        line = f"  pairwise: {2 * p.cells} judge calls ({p.cells} pairs of cells × 2 orders)"
        if p.cost_usd is not None:
            out = "?" if p.output_tokens is None else f"{p.output_tokens:,}"
            line += f"  ~{p.input_tokens:,} in · {out} out  ≤ ${p.cost_usd:.4f}"
        line += f"  ({p.note})" if p.note else ""
        lines.append(line)
    total, as_run, at_batch = estimate.total, estimate.total_as_run, estimate.total_at_batch
    head = "  total: " + (
        "no priced target" if total is None else f"≤ ${total:.4f}" + ("" if estimate.complete else " (priced targets only)")
    )
    if as_run is not None and total is not None and as_run != total:
        head += f"; ≤ ${as_run:.4f} with the batch-mode targets at their batch price"
    elif at_batch is not None and total is not None and at_batch != total:
        head += f"; ≤ ${at_batch:.4f} with --batch"
    if estimate.limit is not None:
        head += f"; defaults.max_total_cost ${float(estimate.limit):.4f}"
        if total is not None and total > float(estimate.limit):
            head += " — the run may stop early and skip the rest"
    lines.append(head)
    lines.append(f"  {'other ' if p is not None else ''}judge calls (model-graded assertions) are not included")
    lines.append("Estimated input tokens a cell, and time at the known rate limits:")
    for t in estimate.targets:
        per_cell = t.input_tokens / t.cells if t.cells else 0
        tokens = f"~{per_cell:,.0f} input tokens a cell ({t.token_method})" if t.token_method else f"{t.kind} target"
        lines.append(f"  {t.target:<20} {tokens}  time: {_time(t)}")
    return lines


def _time(t: TargetEstimate) -> str:
    """How long a target's cells take at its rate limit; a batch-mode target's, the provider's batch window."""
    if t.batched:
        return "a batch: up to 24 h (the providers' window; most end within an hour)"
    if t.rpm is None:
        return "unknown (no rate_limit.rpm)"
    minutes = t.cells / t.rpm
    shown = f"{minutes * 60:.0f}s" if minutes < 1.5 else f"{minutes:.0f}m" if minutes < 90 else f"{minutes / 60:.1f}h"
    return f"≥ ~{shown} at rate_limit {t.rpm:g} rpm"
