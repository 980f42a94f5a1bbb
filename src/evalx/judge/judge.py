"""The judge: model-graded assertions ask a target to grade an output.

One :class:`Judge` is created per run and passed down to every assertion
context. A judge is any target — a provider model, an engine, a Python
callable, or an inline provider target under ``judge.target`` — called with a
synthetic case whose input is the rendered judge prompt, so judge calls get
the target's retries, rate limiting and response cache like any other call.
Each judge target gets its own instance (started lazily, closed with the
run), even when the same target is also being evaluated.

Settings (``judge:`` merged with an assertion's own ``judge:``): ``target``,
``threshold`` (0.8), ``prompt`` (a Jinja2 override), ``samples`` (majority of
N), ``temperature`` (passed to provider targets' params), and
``allow_self_grading``. A judge target runs under its own target settings
(concurrency, timeout_s, retries, backoff_s, cache, rate_limit), resolved once
per judge target by :func:`evalx.targets.resolve_settings` with the same rule
as every target: command line > the judge target's entry (or the inline
``judge.target`` mapping) > ``defaults:`` > built-in. ``judge:`` itself holds
no such setting. A judge call's timeout counts from the moment it starts: after
it got one of the judge target's ``concurrency`` slots and its rate limit let it go.

``semantic_similar`` with ``embedding: TARGET`` asks no judge: it compares the
cosine of two embeddings from a target with an ``embed(text, run)`` method (a
provider whose definition has ``embeddings:``) or a Python callable returning
``{"embedding": [...]}``; those calls use the response cache (where the target
caches) and are costed like judge calls.

Reliability rules: a reply that cannot be read, or a judge call that fails
after the target's retries, makes the assertion an ``error`` with the raw
text kept in ``details``; it is never turned into a pass or a fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import logging
import math
import statistics
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from evalx.assertions import AssertionContext
from evalx.common.attachments import is_parts
from evalx.common.deadline import Deadline, within
from evalx.common.json_types import JSON, JSONObject
from evalx.common.templates import TemplateRenderError, render
from evalx.errors import JudgeError, TargetError, described, one_line
from evalx.judge.checks import same_family, same_model
from evalx.judge.prompts import SYSTEM_PROMPT, TEMPLATES, block_vars, judge_spec, passages
from evalx.judge.prompts import text as _text
from evalx.judge.spec import DEFAULT_THRESHOLD, judge_settings
from evalx.judge.verdict import (
    FACTUALITY_CATEGORIES,
    NO_JUDGE,
    Vote,
    call_usage,
    judge_name,
    parse_category,
    parse_verdict,
    pass_mark,
)
from evalx.models import Case, Cell, Trajectory, Verdict, safe_trajectory
from evalx.targets import close_all, code_parts
from evalx.targets.settings import Overrides, TargetSettings
from evalx.targets.spec import DefaultSettings, TargetSpec, target_spec

__all__ = ["DEFAULT_PASS_ON", "DEFAULT_THRESHOLD", "Judge", "JudgeCall", "JudgeDetails"]

log = logging.getLogger(__name__)

#: promptfoo's factuality default: every class but a disagreement passes
DEFAULT_PASS_ON = ("subset", "superset", "same", "immaterial")


@dataclass
class _Call:
    """One judge call: the raw reply and what it cost."""

    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    cached: bool = False


#: one judge call's reply and cost, as :meth:`Judge.ask` returns it
JudgeCall = _Call


class SampleVote(TypedDict, total=False):
    """One sample's reading of a criterion (``details.samples``): its vote, or why it has none."""

    passed: bool
    score: float
    reason: str
    category: str
    error: str


class CriterionDetails(TypedDict, total=False):
    """One criterion's decision (``details.criteria``, when a check has several or grades characteristics)."""

    criterion: str
    passed: bool | None
    score: float
    reason: str
    error: str


class PromptExtras(TypedDict, total=False):
    """What a kind adds to its judge prompt's scope (templates see each as a variable of its name)."""

    rubric: str | None
    characteristics: list[str]
    criterion: str
    expected: Any  # the reference, as the case or the assertion gives it
    context: Any  # the case's passages, as the case gives them
    passages: list[str]
    steps: list[str]
    scale: int


class JudgeDetails(TypedDict, total=False):
    """A model-graded verdict's ``details``: who judged, what the calls took (:class:`CallUsage`), the raw replies, and per kind more."""

    judge: str
    calls: int
    input_tokens: int
    output_tokens: int
    cached: bool
    cost_usd: float
    raw: list[str]
    criteria: list[CriterionDetails]
    samples: list[SampleVote]
    embedding: str
    """``semantic_similar`` with ``embedding:``: the embedding target, and the ``cosine`` it measured."""
    cosine: float
    category: str
    passages: int
    """The grounded checks' (:mod:`evalx.judge.grounded`): the context's passages, what the judge listed, g_eval's rating."""
    unsupported: list[str]
    missing: list[str]
    scale: int
    rating: float
    steps: list[str]


@dataclass
class _Decision:
    """The majority over a criterion's samples, or why there is none."""

    criterion: str
    passed: bool | None = None
    score: float = 0.0
    reason: str = ""
    error: str | None = None
    raw: list[str] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    votes: list[SampleVote] = field(default_factory=list)

    def details(self) -> CriterionDetails:
        out: CriterionDetails = {"criterion": self.criterion, "passed": self.passed, "score": self.score, "reason": self.reason}
        if self.error:
            out["error"] = self.error
        return out


class _Instance:
    """A started judge target and the limits it is called under (its resolved settings)."""

    def __init__(self, target: Any, settings: TargetSettings) -> None:
        self.target = target
        #: the only queue a judge call waits in; the target's connection pool is as large
        self.semaphore = asyncio.Semaphore(settings.concurrency)
        self.timeout_s = settings.timeout_s
        self.cache = settings.cache
        self.max_bytes = settings.max_response_bytes
        self.pacer: Callable[[], Awaitable[None]] | None = getattr(target, "pacer", None)
        #: batch mode: the judge target's ``prefetch`` (the call's answer from a batch, before its deadline starts)
        self.prefetch: Callable[[Cell, Any], Awaitable[None]] | None = None
        #: calls that got no connection before any got an answer; at preflight.FIRST_CELLS the judge is taken as down
        self.unconnected = 0
        self.answered = False
        #: why no further call is made (its first calls got no connection), or None
        self.down: str | None = None

    def note(self, error: str | None) -> None:
        """A call's outcome: the first preflight.FIRST_CELLS calls all failing to connect take the judge as down."""
        from evalx.targets.preflight import FIRST_CELLS, start_hint
        from evalx.targets.transport.http import is_connect_failure  # aiohttp: a Python judge's run never loads it

        if self.answered or self.down is not None:
            return
        if error is None or not is_connect_failure(error):
            self.answered = True
            return
        self.unconnected += 1
        if self.unconnected >= FIRST_CELLS:
            spec = getattr(self.target, "spec", None) or {}
            hint = start_hint(spec.get("start") if isinstance(spec, dict) else None)
            self.down = f"{error} (its first {FIRST_CELLS} calls got no answer: no more are made; {hint})"


class Judge:
    """Grades model-graded assertions for one run; see the module docstring."""

    def __init__(
        self,
        run: Any,
        *,
        targets: Mapping[str, JSONObject],
        defaults: DefaultSettings | Mapping[str, object],
        overrides: Overrides | None = None,
        settings: JSONObject | None = None,
    ) -> None:
        self.run = run  # the RunContext judge calls are made in
        self.targets = targets  # id -> entry as written, of every target a judge or graded cell may name
        self.defaults = defaults  # the config's defaults: section
        self.overrides = overrides  # the run request's layer of target settings (`evalx run --concurrency`...)
        self.settings = settings or {}
        self._instances: dict[str, _Instance | JudgeError] = {}
        self._lock = asyncio.Lock()
        self._checked: set[tuple[str, str]] = set()  # (judge spec, graded target) pairs looked at
        self._own_cache: Any = None  # a ResponseCache opened for judge calls when the run has none
        #: ``(ledger, round)`` when judge calls may go through a batch API (set by the executor's runtime)
        self.batch: tuple[Any, Any] | None = None

    # ------------------------------------------------------------ lifecycle

    async def aclose(self) -> None:
        await close_all(inst.target for inst in self._instances.values() if isinstance(inst, _Instance))
        self._instances.clear()
        if self._own_cache is not None:
            await self._own_cache.aclose()
            self._own_cache = None

    def configured(self, settings: Mapping[str, object]) -> bool:
        return judge_settings(settings).target is not None

    def _resolve_spec(self, ref: JSON) -> JSONObject:
        """The entry (as written) of the judge target ``ref`` names: an inline one, or a target's id."""
        if isinstance(ref, dict):
            return ref
        if isinstance(ref, str) and ref in self.targets:
            return self.targets[ref]
        raise JudgeError(f"unknown judge target {ref!r}")

    async def _instance(self, spec: JSONObject) -> _Instance:
        key = json.dumps(spec, sort_keys=True, default=str)
        async with self._lock:
            inst = self._instances.get(key)
            if inst is None:
                inst = await self._start(spec)
                self._instances[key] = inst
        if isinstance(inst, JudgeError):
            raise inst
        return inst

    async def _start(self, spec: JSONObject) -> _Instance | JudgeError:
        from evalx.targets import build_target, resolve_settings

        try:
            settings = resolve_settings(spec, self.defaults, self.overrides)  # once per judge target and run
            target = build_target(spec, settings)
            await target.start(self.run)
        except (TargetError, ImportError, ValueError) as exc:
            return JudgeError(f"judge target {spec.get('id')!r} could not start: {exc}")
        except Exception as exc:  # a judge target's own start (a Python judge's import...): the judged assertions' error
            return JudgeError(f"judge target {spec.get('id')!r} could not start: {described(exc)}")
        inst = _Instance(target, settings)
        make = getattr(target, "batch_queue", None)
        if self.batch is not None and make is not None and make(f"judge:{spec.get('id')}", *self.batch) is not None:
            inst.prefetch = getattr(target, "prefetch", None)  # its calls wait in batches, all at once: no concurrency slot
        return inst

    # ------------------------------------------------------------ response cache

    def _cache(self) -> Any:
        """The run's response cache, or one opened for the judge when only the judge caches (asked only when it does)."""
        if getattr(self.run, "cache", None) is not None:
            return self.run.cache
        if self._own_cache is None:
            from evalx.targets.transport.cache import ResponseCache, cache_path

            self._own_cache = ResponseCache(cache_path(self.run.config_dir))
        return self._own_cache

    def _cache_key(self, inst: _Instance, cell: Cell) -> str | None:
        """Like the executor's: the target's own ``cache_key``, else a generic one; None = do not cache."""
        if not inst.cache:
            return None
        own = getattr(inst.target, "cache_key", None)
        try:
            if own is not None:
                key = own(cell, self.run)
                return None if key is None else "judge:" + str(key)
            from evalx.targets.transport.cache import make_key

            case = cell.case.to_dict()
            case.pop("source", None)
            return make_key("judge", inst.target.type, self.run.redactor.obj(inst.target.spec), case, cell.repeat, *code_parts(inst.target))
        except Exception:  # no key means no caching, never a failed assertion
            return None

    async def _invoke(self, inst: _Instance, cell: Cell) -> Trajectory:
        """One call through the response cache; errors are never stored."""
        key = self._cache_key(inst, cell)
        cache = self._cache() if key else None
        if cache is not None and key is not None:
            hit = await cache.get(key)
            if hit is not None:
                traj = Trajectory.from_dict(hit)
                traj.cached = True
                restore = getattr(inst.target, "restore_cached", None)
                if restore is not None:
                    restore(traj)
                return traj
        if inst.down is not None:  # a judge that takes no connection: each further call is its error at once, not its retries
            return Trajectory(error=inst.down)
        if inst.prefetch is not None:
            await inst.prefetch(cell, self.run)  # batch mode: waiting for the batch is not the call's time
        if inst.pacer is not None:
            await inst.pacer()  # the rate limit: not the call's time
        try:
            traj = await within(Deadline(inst.timeout_s), inst.target.invoke(cell, self.run))  # the judge call's own deadline
        except TargetError as exc:
            inst.note(str(exc))
            raise
        inst.note(traj.error)
        try:  # a reply past the judge's max_response_bytes is the call's error (its raw reply is kept with the assertion)
            traj = safe_trajectory(traj, inst.max_bytes)
        except ValueError as exc:
            traj = Trajectory(error=f"the judge returned output evalx cannot store: {exc}")
        if cache is not None and key is not None and traj.error is None:
            stored = traj.to_dict()
            stored.pop("traceback", None)
            stored.pop("cached", None)
            cache.put(key, self.run.redactor.obj(stored))
        return traj

    # ------------------------------------------------------------ bias guard

    def check_self_grading(self, graded_ids: list[str], settings: JSONObject | None = None) -> None:
        """Warn once when the judge is the same model as a target it grades, and once when it is of the same provider family."""
        written = self.settings if settings is None else settings
        ref = written.get("target")
        if ref is None or judge_settings(written).allow_self_grading:
            return
        try:
            entry = self._resolve_spec(ref)
        except JudgeError:
            return
        judge_key = json.dumps(entry, sort_keys=True, default=str)
        judge: TargetSpec | None = None
        hits = []
        family: list[tuple[str, str]] = []
        for target_id in graded_ids:
            graded_entry = self.targets.get(target_id)
            if graded_entry is None or (judge_key, target_id) in self._checked:
                continue
            self._checked.add((judge_key, target_id))
            judge = judge or target_spec(entry)
            graded = target_spec(graded_entry)
            shared = same_model(judge, graded, self._resolver())
            if shared:
                hits.append((target_id, shared))
            elif (name := same_family(judge, graded)) is not None:
                family.append((target_id, f"{name}: {getattr(graded, 'model', None)}"))
        judge_id = (judge.id if judge is not None else "") or "judge"
        if family:
            names = ", ".join(f"{t!r} ({m})" for t, m in family)
            self._warn(
                f"judge {judge_id!r} ({getattr(judge, 'provider', None)}: {getattr(judge, 'model', None)}) is of the same provider family as "
                f"the target{'s' if len(family) > 1 else ''} it grades: {names}; a judge tends to prefer answers from its own "
                "family (self-preference). Use a judge from another provider, or set judge.allow_self_grading: true"
            )
        if hits:
            names = ", ".join(f"{t!r} ({m})" for t, m in hits)
            self._warn(
                f"judge {judge_id!r} is the same model as the target{'s' if len(hits) > 1 else ''} it grades: "
                f"{names}; same-model judges share blind spots. Use a judge from another provider, "
                "or set judge.allow_self_grading: true"
            )

    def _resolver(self) -> Callable[[str], Any]:
        from evalx.common.usercode import resolve_callable

        return lambda ref: resolve_callable(ref, self.run.config_dir)

    def _warn(self, line: str) -> None:
        log.warning(self.run.redactor.text(line))  # it may quote a judge's URL

    # ------------------------------------------------------------ the three types

    async def llm_judge(
        self, ctx: AssertionContext, *, rubric: str | None, characteristics: list[str] | None, threshold: float | None
    ) -> Verdict:
        settings = ctx.judge_settings
        if not self.configured(settings):
            return Verdict.inconclusive(NO_JUDGE)
        default_threshold = pass_mark(threshold, settings)
        criteria = ([rubric] if rubric else []) + [str(c) for c in characteristics or []]
        extra: PromptExtras = {"rubric": rubric, "characteristics": list(characteristics or [])}

        def interpret(text: str) -> Vote:
            passed, score, reason = parse_verdict(text)
            if score is None:
                score = 1.0 if passed else 0.0
            if passed is None:
                passed = score >= default_threshold
            elif threshold is not None:
                passed = passed and score >= threshold
            return Vote(passed, score, reason)

        decisions = await asyncio.gather(
            *(self._decide(ctx, "llm_judge", criterion, {**extra, "criterion": criterion}, interpret) for criterion in criteria)
        )
        return self._combine(ctx, decisions, what="characteristic" if characteristics else "rubric")

    async def semantic_similar(self, ctx: AssertionContext, *, expected: Any, threshold: float | None, embedding: str | None) -> Verdict:
        settings = ctx.judge_settings
        limit = pass_mark(threshold, settings)
        if embedding is not None:
            return await self._cosine(ctx, expected, limit, embedding)
        if not self.configured(settings):
            return Verdict.inconclusive(NO_JUDGE)

        def interpret(text: str) -> Vote:
            passed, score, reason = parse_verdict(text)
            if score is None:  # a bare PASS/FAIL: all or nothing
                score = 1.0 if passed else 0.0
            return Vote(score >= limit, score, reason)

        decision = await self._decide(ctx, "semantic_similar", "means the same as the reference", {"expected": expected}, interpret)
        verdict = self._combine(ctx, [decision], what="similarity")
        if verdict.error is None and verdict.passed is not None:
            verdict.reason = f"similarity {verdict.score:.2f} {'≥' if verdict.passed else '<'} {limit:g}: {verdict.reason}"
        return verdict

    async def factuality(self, ctx: AssertionContext, *, expected: Any, pass_on: list[str] | None) -> Verdict:
        settings = ctx.judge_settings
        if not self.configured(settings):
            return Verdict.inconclusive(NO_JUDGE)
        passing = set(pass_on if pass_on is not None else DEFAULT_PASS_ON)

        def interpret(text: str) -> Vote:
            category, reason = parse_category(text)
            ok = category in passing
            return Vote(ok, 1.0 if ok else 0.0, reason, category)

        decision = await self._decide(ctx, "factuality", "facts consistent with the reference", {"expected": expected}, interpret)
        verdict = self._combine(ctx, [decision], what="factuality")
        categories = [v.get("category") for v in decision.votes if v.get("category")]
        if verdict.error is None and categories:
            top = max(set(categories), key=lambda c: (categories.count(c), -FACTUALITY_CATEGORIES.index(c)))
            verdict.reason = f"{top}: {verdict.reason}"
            assert verdict.details is not None
            verdict.details["category"] = top
        return verdict

    async def grounded(self, ctx: AssertionContext, kind: str, params: Mapping[str, object]) -> Verdict:
        """``faithfulness``, ``answer_relevance``, ``context_recall`` and ``g_eval``: see :mod:`evalx.judge.grounded`."""
        from evalx.judge.grounded import grade

        return await grade(self, ctx, kind, params)

    # ------------------------------------------------------------ asking

    def _prompt(self, ctx: Any, kind: str, criterion: str, extra: PromptExtras) -> str:
        options = judge_settings(ctx.judge_settings)
        case = ctx.case.to_dict()
        expected = extra.get("expected", ctx.case.expected)
        scope: dict[str, object] = {  # the template's variables
            "kind": kind,
            "case": case,
            "input": _text(ctx.case.input),
            "output": ctx.output.text,
            "tool_calls": [c.name for c in ctx.output.tool_calls],
            "expected": expected,
            "reference": _text(expected),
            "rubric": extra.get("rubric"),
            "characteristics": extra.get("characteristics") or [],
            "criterion": criterion,
            "threshold": DEFAULT_THRESHOLD if options.threshold is None else options.threshold,
            "context": ctx.case.context,  # the case's passages (grounded kinds; any prompt may use them)
            "passages": passages(ctx.case.context),
        }
        for key, value in extra.items():  # what a kind adds to its prompt (g_eval's steps and scale...)
            scope.setdefault(key, value)
        scope.update(block_vars(scope))  # nonce (the block tags' mark) and tools: untrusted text cannot end its block
        template = options.prompt or TEMPLATES[kind]
        try:
            return render(template, scope)
        except TemplateRenderError as exc:
            raise JudgeError(f"judge prompt: {exc}") from None

    def _call_spec(self, settings: JSONObject) -> JSONObject:
        """The mapping the judge target of ``settings`` is built and its calls cached from."""
        options = judge_settings(settings)
        template = options.prompt or ""
        return judge_spec(
            self._resolve_spec(settings["target"]),
            options.temperature,
            # OpenAI's JSON mode refuses a prompt that does not mention JSON
            json_mode=not template or "json" in str(template).lower(),
            batch=_written_batch(settings.get("batch")),
        )

    async def started_target(self) -> Any | None:
        """The config's judge target, started (the instance its calls use): what the pre-flight check connects to.

        None without a ``judge: {target}``, or when it cannot start (the judged checks say why).
        """
        if not self.configured(self.settings):
            return None
        try:
            return (await self._instance(self._call_spec(self.settings))).target
        except JudgeError:
            return None

    async def _call(self, ctx: Any, prompt: str, sample: int, meta: Mapping[str, JSON]) -> _Call:
        settings = ctx.judge_settings
        options = judge_settings(settings)
        spec = self._call_spec(settings)
        judge_input: Any = prompt
        if options.attachments and is_parts(ctx.case.input):  # the prompt, then the case's images and documents
            judge_input = [{"type": "text", "text": prompt}, *(p for p in ctx.case.input if p["type"] != "text")]
            spec = {k: v for k, v in spec.items() if k != "prompt"}  # the parts are the user message
        inst = await self._instance(spec)
        keyed = prompt if isinstance(judge_input, str) else json.dumps(judge_input, sort_keys=True)
        digest = hashlib.sha256(keyed.encode()).hexdigest()[:12]
        case = Case(
            id=f"judge-{digest}",
            input=judge_input,
            dataset="judge",
            system=SYSTEM_PROMPT,
            metadata={"judge": {**meta, "sample": sample, "temperature": options.temperature, "graded_target": ctx.target}},
        )
        cell = Cell(index=-1, target=str(spec["id"]), dataset="judge", case=case, repeat=sample)
        async with inst.semaphore if inst.prefetch is None else contextlib.nullcontext():
            try:
                traj = await self._invoke(inst, cell)
            except asyncio.TimeoutError:
                raise JudgeError(f"the judge call timed out after {inst.timeout_s:g}s") from None
            except TargetError as exc:
                raise JudgeError(f"the judge call failed: {exc}") from None
            except asyncio.CancelledError:
                raise  # the cell's timeout, or the run stops
            except BaseException as exc:  # a Python judge's own exception, SystemExit too: this assertion's error, not the run's
                raise JudgeError(f"the judge call failed: {one_line(exc)}") from None
        call = _Call(
            text=traj.text or "",
            input_tokens=traj.usage.input_tokens,
            output_tokens=traj.usage.output_tokens,
            cost_usd=traj.cost_usd,
            cached=traj.cached,
        )
        if traj.error:
            raise _CallFailed(f"the judge call failed: {traj.error}", call)
        return call

    async def ask(self, ctx: Any, prompt: str, *, sample: int = 0, meta: Mapping[str, JSON] | None = None) -> JudgeCall:
        """One call of the judge ``ctx.judge_settings`` names, with ``prompt``: its raw reply, tokens and cost.

        For checks that build their own prompt (:mod:`evalx.judge.pairwise`): the
        same target instance, limits, response cache and costing as every judge
        call. ``ctx`` needs ``judge_settings`` and ``target`` (the graded target).
        Raises :class:`JudgeError`; when the call was made but failed, the error's
        ``call`` attribute holds what it cost.
        """
        return await self._call(ctx, prompt, sample, meta or {})

    async def _decide(self, ctx: Any, kind: str, criterion: str, extra: PromptExtras, interpret: Callable[[str], Vote]) -> _Decision:
        """Ask ``samples`` times and take the majority; see :meth:`_majority`."""
        decision = _Decision(criterion)
        settings = ctx.judge_settings
        try:
            prompt = self._prompt(ctx, kind, criterion, extra)
            self.check_self_grading([ctx.target], settings)
        except JudgeError as exc:
            decision.error = str(exc)
            return decision
        n = max(1, judge_settings(settings).samples or 1)
        meta: JSONObject = {
            "kind": kind,
            "criterion": criterion,
            "output": ctx.output.text,
            "expected": extra.get("expected", ctx.case.expected),
        }

        async def one(i: int) -> tuple[_Call | None, Vote | JudgeError]:
            try:
                call = await self._call(ctx, prompt, i, meta)
            except _CallFailed as exc:
                return exc.call, JudgeError(str(exc))
            except JudgeError as exc:
                return None, exc
            try:
                return call, interpret(call.text)
            except JudgeError as exc:
                return call, exc

        # gathered, then read in sample order, so results diff cleanly between runs
        answers = await asyncio.gather(*(one(i) for i in range(n)))
        for call, _ in answers:
            if call is not None:
                decision.calls.append(call)
                decision.raw.append(call.text)
        return self._majority(decision, [outcome for _, outcome in answers], n)

    @staticmethod
    def _majority(decision: _Decision, outcomes: list[Vote | JudgeError], n: int) -> _Decision:
        """Majority of the readable samples; ties fail; too many unreadable samples is an error.

        A sample that errors is not a vote. When more than half of the samples
        have no vote (at least half, for an even ``n``) there is no majority to
        report and the criterion is an error. Otherwise it passes on a strict
        majority of the votes, so a tie fails: the judge could not agree that
        the output passes. The score is the median of the votes' scores.
        """
        votes = [o for o in outcomes if isinstance(o, Vote)]
        errors = [o for o in outcomes if isinstance(o, JudgeError)]
        for o in outcomes:
            if isinstance(o, Vote):
                decision.votes.append(
                    {"passed": o.passed, "score": o.score, "reason": o.reason, **({"category": o.category} if o.category else {})}
                )
            else:
                decision.votes.append({"error": str(o)})
        if errors and len(votes) * 2 <= n:
            first = errors[0]
            decision.error = str(first) if n == 1 else f"{len(errors)} of {n} judge samples failed: {first}"
            return decision
        passes = sum(v.passed for v in votes)
        decision.passed = passes * 2 > len(votes)
        decision.score = float(statistics.median(v.score for v in votes))
        agreeing = next(v for v in votes if v.passed == decision.passed) if any(v.passed == decision.passed for v in votes) else votes[0]
        decision.reason = agreeing.reason
        if n > 1:
            decision.reason += f" ({passes}/{len(votes)} samples passed)"
        return decision

    def _combine(self, ctx: Any, decisions: list[_Decision], *, what: str) -> Verdict:
        """One verdict from per-criterion decisions: any conclusive fail fails; else an error errs."""
        calls = [c for d in decisions for c in d.calls]
        made = _details(calls, judge=judge_name(ctx.judge_settings.get("target")))
        made["raw"] = [t for d in decisions for t in d.raw]
        if len(decisions) > 1 or what == "characteristic":
            made["criteria"] = [d.details() for d in decisions]
        elif decisions and len(decisions[0].votes) > 1:
            made["samples"] = decisions[0].votes
        details = dict(made)  # as a verdict carries it
        failed = [d for d in decisions if d.passed is False]
        broken = [d for d in decisions if d.error is not None]
        graded = [d for d in decisions if d.error is None]
        score = statistics.fmean(d.score for d in graded) if graded else 0.0
        if len(decisions) == 1 and what != "characteristic":
            d = decisions[0]
            if d.error is not None:
                return Verdict(None, 0.0, f"judge error: {d.error}", error=d.error, details=details)
            return Verdict(d.passed, d.score, d.reason, details=details)
        n = len(decisions)
        plural = (
            ("characteristic" if n == 1 else "characteristics") if what == "characteristic" else ("criterion" if n == 1 else "criteria")
        )
        if failed:
            parts = [f"{d.criterion!r}: {d.reason}" if d.reason else repr(d.criterion) for d in failed]
            reason = f"{len(failed)} of {len(decisions)} {plural} failed — " + "; ".join(parts)
            if broken:
                reason += f" ({len(broken)} could not be graded)"
            return Verdict(False, score, reason, details=details)
        if broken:
            first = broken[0]
            msg = f"{len(broken)} of {len(decisions)} {plural} could not be graded — {first.criterion!r}: {first.error}"
            return Verdict(None, score, f"judge error: {msg}", error=msg, details=details)
        if n == 1:
            only = decisions[0]
            return Verdict(
                True, score, f"{only.criterion!r}: {only.reason}" if only.reason else f"{only.criterion!r} holds", details=details
            )
        return Verdict(True, score, f"all {n} {plural} hold", details=details)

    # ------------------------------------------------------------ embeddings

    async def _cosine(self, ctx: Any, expected: Any, limit: float, ref: str) -> Verdict:
        """Cosine similarity of the output's and the reference's embeddings (the two asked for at once)."""
        calls: list[_Call] = []
        if not ctx.output.text.strip():  # nothing to embed (OpenAI refuses an empty input): not similar
            empty = _details(calls, embedding=ref)
            return Verdict(False, 0.0, "the output is empty: nothing to compare with the reference", details=dict(empty))
        try:
            spec = self._resolve_spec(ref)
            inst = await self._instance(copy.deepcopy(spec))
            answers = await asyncio.gather(
                *(self._embed(inst, spec, text) for text in (ctx.output.text, _text(expected))), return_exceptions=True
            )
            calls = [a[1] for a in answers if isinstance(a, tuple)]
            failed = next((a for a in answers if isinstance(a, BaseException)), None)
            if failed is not None:
                raise failed
            output_vector, expected_vector = (a[0] for a in answers if isinstance(a, tuple))
            similarity = _cosine(output_vector, expected_vector)
        except JudgeError as exc:
            return Verdict(None, 0.0, f"embedding error: {exc}", error=str(exc), details=dict(_details(calls, embedding=ref)))
        details = _details(calls, embedding=ref)
        details["cosine"] = similarity
        score = min(1.0, max(0.0, similarity))
        passed = similarity >= limit
        return Verdict(passed, score, f"cosine similarity {similarity:.3f} {'≥' if passed else '<'} {limit:g}", details=dict(details))

    async def _embed(self, inst: _Instance, spec: JSONObject, text: str) -> tuple[list[float], _Call]:
        """One text's embedding, through the response cache like every judge call."""
        target = inst.target
        embed: Callable[..., Awaitable[Any]] | None = getattr(target, "embed", None)
        async with inst.semaphore:
            try:
                if embed is not None and getattr(target, "can_embed", True):  # a provider target with an embeddings request
                    vector, call = await self._embed_call(inst, embed, text)
                elif spec.get("type") == "python":  # fn(text) returns {"embedding": [...]}
                    case = Case(id="embedding-" + hashlib.sha256(text.encode()).hexdigest()[:12], input=text, dataset="judge")
                    case.metadata = {"judge": {"kind": "embedding"}}
                    traj = await self._invoke(inst, Cell(-1, str(spec.get("id")), "judge", case))
                    if traj.error:
                        raise JudgeError(f"the embedding call failed: {traj.error}")
                    vector = (traj.raw or {}).get("embedding") if isinstance(traj.raw, dict) else None
                    call = _Call(input_tokens=traj.usage.input_tokens, cost_usd=traj.cost_usd, cached=traj.cached)
                else:
                    raise JudgeError(_cannot_embed(spec, target))
            except asyncio.TimeoutError:
                raise JudgeError(f"the embedding call timed out after {inst.timeout_s:g}s") from None
            except TargetError as exc:
                raise JudgeError(f"the embedding call failed: {exc}") from None
            except JudgeError:
                raise
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # the embedding target's own exception, SystemExit too: this assertion's error
                raise JudgeError(f"the embedding call failed: {described(exc)}") from None
        if not isinstance(vector, list) or not vector or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vector):
            raise JudgeError(f"target {spec.get('id')!r} returned no embedding (a list of numbers)")
        return [float(x) for x in vector], call

    async def _embed_call(self, inst: _Instance, embed: Callable[..., Awaitable[Any]], text: str) -> tuple[Any, _Call]:
        """``target.embed(text, run)``, cached under the target's ``embedding_cache_key`` when it has one.

        A hit is repriced with ``embedding_cost`` (today's prices, as cached cells are); failures are never stored.
        """
        target = inst.target
        key = None
        if inst.cache and getattr(target, "embedding_cache_key", None) is not None:
            key = target.embedding_cache_key(text)
        cache = self._cache() if key else None
        if cache is not None and key is not None:
            hit = await cache.get("judge:" + key)
            if hit is not None and isinstance(hit.get("embedding"), list):
                tokens = int(hit.get("input_tokens") or 0)
                cost = target.embedding_cost(tokens) if getattr(target, "embedding_cost", None) is not None else hit.get("cost_usd")
                return hit["embedding"], _Call(input_tokens=tokens, cost_usd=cost, cached=True)
        if inst.pacer is not None:
            await inst.pacer()  # the rate limit: not the call's time
        result = await within(Deadline(inst.timeout_s), embed(text, self.run))
        vector, usage = result if isinstance(result, tuple) else (result, {})
        call = _Call(input_tokens=int(usage.get("input_tokens") or 0), cost_usd=usage.get("cost_usd"), cached=bool(usage.get("cached")))
        if cache is not None and key is not None and isinstance(vector, list):
            cache.put("judge:" + key, {"embedding": vector, "input_tokens": call.input_tokens, "cost_usd": call.cost_usd})
        return vector, call


def _cannot_embed(spec: JSONObject, target: Any) -> str:
    """Why the ``embedding:`` target cannot embed, naming the provider definition that lacks the request."""
    name = f"target {spec.get('id')!r}"
    if spec.get("type") == "provider":
        definition = getattr(target, "definition", None)
        where = f" ({definition.file})" if definition is not None else ""
        return f"{name} cannot produce embeddings: provider {spec.get('provider')!r} has no embeddings: section in its definition{where}"
    return f"{name} ({spec.get('type')}) cannot produce embeddings"


class _CallFailed(JudgeError):
    """A judge call whose trajectory reported an error, with what it cost."""

    def __init__(self, message: str, call: _Call) -> None:
        super().__init__(message)
        self.call = call


def _details(calls: list[_Call], *, judge: str | None = None, embedding: str | None = None) -> JudgeDetails:
    """A verdict's details to start from: who judged (or embedded), then what the calls took (their cost when they said one)."""
    usage, cost = call_usage(calls)
    details: JudgeDetails = {"judge": judge} if judge is not None else {"embedding": str(embedding)}
    details["calls"], details["input_tokens"] = usage["calls"], usage["input_tokens"]
    details["output_tokens"], details["cached"] = usage["output_tokens"], usage["cached"]
    if cost is not None:
        details["cost_usd"] = cost
    return details


def _written_batch(value: object) -> bool | JSONObject | None:
    """``judge.batch`` as the judge target's entry takes it (a record's options as their mapping)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, Mapping):
        return dict(value)
    return {k: v for k, v in vars(value).items() if v is not None} if hasattr(value, "__dict__") else None


def _cosine(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        raise JudgeError(f"embeddings differ in length ({len(a)} and {len(b)})")
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(x * x for x in b))
    if not na or not nb:
        raise JudgeError("an embedding is all zeros")
    return sum(x * y for x, y in zip(a, b)) / (na * nb)
