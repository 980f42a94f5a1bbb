"""The HTML report: one self-contained page to read a run or a matrix.

:func:`write_html` reads ``results.jsonl`` once, line by line, and writes
``report.html``: inline CSS and JS (``templates/``), inline SVG charts
(:mod:`._charts`) and the cells embedded once as JSON in a
``<script type="application/json">`` that the page renders from. Nothing is
fetched, so the file works from a CI artifact or an email attachment; a
Content-Security-Policy forbids the network and every script but ours (its
hash covers report.js alone, never the data).

The rows are never all in memory: case and cell rows are encoded as they are
read, :data:`ROW_BATCH` at a time, into a spool (memory while small, a temporary file past
:data:`SPOOL_BYTES`); the page (header and charts need only the summary and
small per-target aggregates) is rendered around a marker, and the embedded
JSON is streamed in its place, byte for byte what one ``embed_json`` of the
whole payload gives. A case is numbered when first seen; a results file whose
cases are not contiguous (a killed run's completion order) is read a second
time with a full case index.

Every string from a run (model output, case fields, errors) is untrusted:
the template autoescapes; :func:`embed_json` escapes ``< > &`` and
U+2028/U+2029 so ``</script>`` in data cannot end the script; the page only
ever sets ``textContent``. ANSI escapes are stripped and other control
characters shown as symbols (NUL becomes ``␀``). Long texts are clipped to a
cap with their full length recorded (the page says so and offers "show all"
up to the cap), and past :data:`BUDGET` characters of text the remaining
cells are embedded leaner, so a 10,000-cell report stays a file a browser
opens in a second. A run of more than :data:`MAX_CELLS` cells
(``--html-max-cells``) keeps its header, tables and charts (from the summary
and aggregates of every cell) but embeds a :class:`Sampling` of its cells:
failures and errors first, an evenly spread sample of the passes, only the
cases they reference; a notice at the top of the page gives the numbers.

Embedded data (short keys: it is repeated for every cell)::

    {"v": 1, "run_id": str, "targets": [id, ...], "repeats": bool,
     "cases": [{"d": dataset, "id": case_id, "cat", "dif", "tags": [...],
                "in": input, "ex": expected, "src": "file:line", "ds": description, "nt": notes, "cx": context}, ...],
     "cells": [{"c": case index, "t": target index, "r": repeat, "s": status,
                "sc": score, "ms": latency, "tt": ttft, "usd": cost,
                "jusd": judge cost, "tk": [in, out, cache_hit], "it": iterations,
                "ca": cached, "st": stop reason, "tr": truncated (1), "x": text, "rq": request, "tc": [[name, args, result]],
                "a": [[passed, type, name, score, reason, details, error]],
                "e": error, "tb": traceback, "ev": [event, ...],
                "cv": [{"i": turn input, "o": reply text, "ms": latency, "tc": [[name, args, result]],
                        "a": [assertion, ...] (only when "a" has none with a turn), "e": error,
                        "f": 1 when the turn failed}, ...],
             "rv": [verdict, the run's own status, reviewer, when, comment] (a review mark: "s" is the verdict),
             "pw": [[other target, the judge's verdict in words, [[target shown first, the judge's reply], ...]], ...]
                   (a pairwise judge's comparisons of this cell, at most MAX_PAIRWISE)}, ...],
     "changes": {"failing": [[target, dataset, case_id]], "passing": [...]},
     "sample": {"cells", "cap", "embedded", "bad", "bad_kept", "bad_cap", "skipped", "skipped_kept",
                "passes", "pass_kept", "command"}}  (only past the cap)

A clipped field ``k`` comes with ``kN``, the full length in characters;
absent fields are null or empty. An assertion that checked one turn of a
conversation has an eighth item, the 1-based turn; ``cv`` (a conversation,
the cell's ``turns``) keeps at most :data:`MAX_TURNS` turns (``cvN``: how
many there were), each text clipped at :data:`TURN_CAP`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid
from array import array
from collections.abc import Iterable, Mapping
from datetime import datetime
from importlib import resources
from pathlib import Path, PurePath, PureWindowsPath
from typing import Any, TypedDict, cast

import jinja2
from markupsafe import Markup

from evalx.common.ansi import strip_ansi
from evalx.common.atomic import atomic_write
from evalx.common.attachments import data_of, is_parts, parts_text
from evalx.common.json_types import JSON, JSONObject, as_array, json_encoder
from evalx.common.template_cache import template_cache
from evalx.errors import writing
from evalx.reports import charts as _charts
from evalx.reports.breakdown import cross_table, score_text
from evalx.reports.pairwise import html_disagreements, html_pairwise, pairwise_verdict
from evalx.reports.spool import Spool
from evalx.reports.text import cost_gaps, pooled_footnote, tokens_shown
from evalx.results.display import BODY_CHARS, cell_label, escape, show_id
from evalx.results.figures import ci as _ci
from evalx.results.figures import count as _count
from evalx.results.figures import duration as _duration
from evalx.results.figures import finite, rate_limits_text, target_cost
from evalx.results.figures import ms as _ms
from evalx.results.figures import pct as _pct
from evalx.results.figures import usd as _usd
from evalx.results.model import (
    STATUSES,
    AssertionRecord,
    BaselineView,
    CellCounts,
    CellResult,
    PairwiseRecord,
    RepeatsSummary,
    RunSummary,
    TargetFigures,
)
from evalx.results.outcome import interruption, resume_command
from evalx.results.reviews import reviews_line
from evalx.results.store import read_results
from evalx.version import __version__

__all__ = [
    "MAX_CELLS",
    "HtmlStream",
    "Sampling",
    "clean_text",
    "embed_json",
    "page_environment",
    "report_script_source",
    "template_text",
    "write_html",
]

#: characters of each long text field (output, input, traceback...) kept per cell
TEXT_CAP = 20_000
#: characters of a rendered request kept
REQUEST_CAP = 8_000
#: a case's attachments listed in its detail; an image of at most THUMB_BYTES (of THUMB_TYPES) is embedded as a
#: thumbnail (a data: URL), THUMBS_BUDGET bytes of them a report; a larger one, or past the budget, is shown by reference
MAX_ATTACHMENTS = 20
THUMB_BYTES = 256 * 1024
THUMBS_BUDGET = 8 * 1024 * 1024
THUMB_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
#: characters of one tool call's args / result kept
TOOL_CAP = 2_000
#: tool calls kept per cell
MAX_TOOL_CALLS = 100
#: spans of a traced cell shown in its waterfall (the rest counted; all of them are in results.jsonl)
MAX_SPANS = 200
#: spans shown per cell in a report lean for its size (the many-cells mode)
LEAN_SPANS = 20
#: characters of a span's key attributes shown
SPAN_CAP = 300
#: the span attributes a waterfall row shows, in this order (GenAI and OpenInference conventions)
SPAN_KEYS = (
    "gen_ai.operation.name",
    "gen_ai.tool.name",
    "tool.name",
    "gen_ai.request.model",
    "llm.model_name",
    "openinference.span.kind",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "llm.token_count.prompt",
    "llm.token_count.completion",
    "http.route",
)
#: characters of an assertion's reason / judge details kept
REASON_CAP = 4_000
#: pairwise comparisons shown in a cell's detail (the rest are in results.jsonl)
MAX_PAIRWISE = 20
#: turns of a conversation kept per cell, and characters of each turn's input and reply
MAX_TURNS = 100
TURN_CAP = 4_000
#: engine events kept per cell, and characters of each
MAX_EVENTS = 200
EVENT_CAP = 1_000
#: characters of text embedded at full caps; later cells use the lean caps below
BUDGET = 16_000_000
LEAN_FACTOR = 20  # lean caps are the caps above divided by this
LEAN_EVENTS = 0
#: newly failing / passing entries embedded from a baseline
MAX_CHANGES = 2_000
#: encoded rows are kept in memory up to this many characters, then spilled to a temporary file
SPOOL_BYTES = 4 * 1024 * 1024
#: encoded rows are gathered up to this many characters before they go to the spool
PENDING_CHARS = 64 * 1024
#: rows encoded together (each is at most a few caps of text)
ROW_BATCH = 32
#: the most cells report.html embeds by default (``--html-max-cells``, 0: no cap); a run of more is sampled.
#: Measured for issue 16: at 10,000 cells whose outputs all hit the text caps (42 MB) the page opens
#: in headless Chromium in 1.7-2.5 s on a loaded 2-core machine, at 20,000 (70 MB) in 3.0-3.9 s
MAX_CELLS = 10_000
#: past the cap, at least this fraction of it is kept for passing cells (1,000 at the default cap)
PASS_SHARE = 10


class _TargetRow(CellCounts):
    """A target's row of the header table: its counts (``pass`` is a keyword, hence CellCounts), then its figures."""

    id: str
    color: str
    p50: float | None
    p95: float | None
    p99: float | None
    ttft_p50: float | None
    ttft_p95: float | None
    tokens: int
    tokens_text: str
    cost: float | None
    cost_text: str  # the cost as shown: "unknown" when no cell could be priced
    judge_cost: float | None
    cost_per_pass: float | None
    repeats: _RepeatRow | None


class _RepeatRow(TypedDict):
    """A target's repeat figures as the header table shows them."""

    k: float | None
    pass_at_k: float | None
    pass_hat_k: float | None
    flaky_cases: int


class _BreakdownRow(TypedDict):
    """One row (a category, or all of them) of a target's category × difficulty table."""

    name: str
    total: bool
    cells: list[str]
    all: str
    mean_score: str


class _BreakdownView(TypedDict):
    """A target's category × difficulty table as the template shows it, texts ready."""

    id: str
    color: str
    pass_rate: float | None
    pass_rate_ci: list[float] | None
    mean_score: str
    scored: int
    difficulties: list[str]
    rows: list[_BreakdownRow]


class _SizeRow(TypedDict):
    """One row of the output-size table: a target's cells of one difficulty (texts ready)."""

    target: str
    difficulty: str
    figures: list[str]


class _SlowRow(TypedDict):
    target: str
    case: str
    status: str
    latency: str


class _SlowView(TypedDict):
    head: str
    rows: list[_SlowRow]


class _HeaderView(TypedDict):
    """The figures the page's header, tables and charts show (``h`` in report.html.j2), texts ready."""

    run_id: str
    name: str
    config: str
    started_at: str | None
    duration_s: float | None
    status: str
    totals: CellCounts
    targets: list[_TargetRow]
    latency: dict[str, float | None]
    ttft: dict[str, float | None]
    has_ttft: bool
    interrupted: _InterruptedView | None
    scope: JSONObject | None
    tokens: dict[str, int]
    cache_hit_ratio: float | None
    cached_cells: int
    #: cells answered from a provider's batch API (their cost at its batch price)
    batched_cells: int
    response_cache_hit_ratio: float | None
    cost: float | None
    judge_cost: float | None
    cost_missing: int
    cost_gaps: str | None
    tokens_text: str
    inconclusive: int
    reviewed: str | None
    #: what the providers' rate limits cost, per target that met one (None: none did)
    rate_limits: str | None
    repeats: RepeatsSummary | None
    cells_planned: int
    several: bool
    pooled_note: str | None
    breakdowns: list[_BreakdownView]
    output_sizes: list[_SizeRow]
    slowest: _SlowView | None
    pairwise: JSONObject | None
    disagreements: JSONObject | None


# the characters evalx.results.display shows escaped in long text: controls, surrogates, invisible and bidi characters
_CONTROL = re.compile(f"[{BODY_CHARS}]")
_NEWLINES = re.compile(r"\r\n?")
_SURROGATE = re.compile("[\ud800-\udfff]")
# what must never appear raw inside a <script> element: it could close it, open
# a comment, or (U+2028/9) end a line in older JavaScript parsers
_SCRIPT_UNSAFE = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"))  # U+2028/9 only in non-ASCII text


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures block: NUL -> ␀, ESC -> ␛
    if code == 0x7F:
        return "\u2421"
    return escape(match.group())  # C1, a lone surrogate, an invisible or bidi character: \x85, \ud800, \u202e


def value_json(value: Any) -> str:
    """``value`` as compact JSON, the way report.html embeds a request or a tool's arguments.

    The page indents it when it shows it (``pretty`` in report.js): ``json.dumps``
    with ``indent`` runs Python's own encoder, not the C one, and cost 10 µs of a
    cell's ~400 µs on an instant provider run (bench/RESULTS.md, issue 29).
    """
    return _VALUE_ENCODER(value)


def clean_text(value: Any) -> str:
    """Untrusted text made harmless to show: ANSI escapes removed, control characters visible.

    Newlines and tabs stay; CRLF becomes LF; lone surrogates become U+FFFD.
    Values that are not strings become their JSON (compact) or ``str()``.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
        if text.isascii() and text.isprintable():  # no escape, CR or control character to see to (most text): no regex pass
            return text
    else:
        try:
            text = value_json(value)
        except (TypeError, ValueError, RecursionError):
            text = str(value)
        else:  # JSON writes every control character as an escape but DEL: no need to test each character (a request's 5 K instructions)
            if text.isascii() and "\x7f" not in text:
                return text
    text = strip_ansi(text)
    if "\r" in text:
        text = _NEWLINES.sub("\n", text)
    return _CONTROL.sub(_visible, text)


def embed_json(value: Any) -> str:
    """``value`` as JSON that is safe inside ``<script type="application/json">``.

    ``<``, ``>``, ``&``, U+2028 and U+2029 become ``\\uXXXX`` escapes (JSON.parse
    reads them back unchanged), so no string in the data can end the element;
    lone surrogates become ``\\ufffd``.
    """
    text = _EMBED_ENCODER(value)
    if not text.isascii():
        text = _SURROGATE.sub(_replacement, text).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    for char, escaped in _SCRIPT_UNSAFE:  # str.replace where present: a third of str.translate's time on a row
        if char in text:
            text = text.replace(char, escaped)
    return text


def _replacement(_: re.Match[str]) -> str:
    return "\\ufffd"


#: one encoder for every row (``json.dumps`` with options builds a new one per call)
_EMBED_ENCODER = json_encoder(allow_nan=False, default=str)
_VALUE_ENCODER = json_encoder(separators=(", ", ": "), default=str)


def _int(value: Any) -> int:
    """A stored count as a whole number (through a float, as a figure), 0 for anything else or below 1."""
    number = float(value) if type(value) is int else finite(value)  # (a token count: finite() would only make it a float)
    return int(number) if number is not None and number > 0 else 0


class _Embedder:
    """Clips texts to the caps and counts what was embedded, to stay within the budget."""

    def __init__(self) -> None:
        self.used = 0

    @property
    def lean(self) -> bool:
        return self.used > BUDGET

    def cap(self, cap: int) -> int:
        return max(200, cap // LEAN_FACTOR) if self.lean else cap

    def put(self, into: JSONObject, key: str, value: Any, cap: int) -> None:
        """``into[key]`` = the cleaned text, clipped; ``into[key + "N"]`` = full length when clipped."""
        if not value and (value is None or value == "" or value == [] or value == {}):
            return
        text = clean_text(value)
        limit = max(200, cap // LEAN_FACTOR) if self.used > BUDGET else cap  # self.cap(cap), inline
        if len(text) > limit:
            into[key + "N"] = len(text)
            text = text[:limit]
        self.used += len(text)
        into[key] = text

    def text(self, value: Any, cap: int) -> str:
        text = clean_text(value)
        limit = max(200, cap // LEAN_FACTOR) if self.used > BUDGET else cap  # self.cap(cap), inline
        if len(text) > limit:
            text = text[: limit - 1] + "…"
        self.used += len(text)
        return text


class _Rows:
    """A JSON array's items, encoded by :func:`embed_json` :data:`ROW_BATCH` at a time, in a spool.

    ``embed_json`` of a list is its items' ``embed_json``, joined by commas: one
    encoder call for a batch rather than one a row (the call, not the row, was
    most of a small row's cost).
    """

    def __init__(self, spool_dir: Path | None) -> None:
        self.count = 0
        self.batch: list[JSONObject] = []
        self.spool = Spool(max_size=SPOOL_BYTES, batch=PENDING_CHARS, dir=spool_dir, errors="replace")

    def add(self, row: JSONObject) -> None:
        self.batch.append(row)
        self.count += 1
        if len(self.batch) >= ROW_BATCH:
            self.flush()

    def flush(self) -> None:
        """Encode the rows not encoded yet into the spool."""
        if self.batch:
            items = embed_json(self.batch)[1:-1]  # "[row,row]" without its brackets
            self.spool.write("," + items if self.count > len(self.batch) else items)
            self.batch = []

    def copy_to(self, out: Any) -> None:
        self.flush()
        self.spool.copy_to(out)

    def close(self) -> None:
        self.spool.close()


class Sampling:
    """Which cells a report of more than its cap embeds, decided from each cell's status alone.

    Planned from the summary's totals before the first cell: failures and
    errors first (the first ``bad_cap`` in matrix order), then skipped cells
    in what is left, and the rest of the cap for passing cells, at least
    ``cap // PASS_SHARE`` of them, spread evenly over the run (pass number
    ``k`` is kept when ``k * pass_cap % passes < pass_cap``: exactly
    ``pass_cap`` of ``passes``, the first among them). The ``*_kept`` counts
    are what was embedded; the caps hold even if the totals were wrong.
    """

    __slots__ = (
        "bad",
        "bad_cap",
        "bad_kept",
        "cap",
        "cells",
        "pass_cap",
        "pass_kept",
        "passes",
        "passes_seen",
        "skipped",
        "skipped_cap",
        "skipped_kept",
    )

    def __init__(self, cap: int, totals: Mapping[str, object]) -> None:
        self.cap = cap
        self.cells = _int(totals.get("cells"))
        self.passes = _int(totals.get("pass"))
        self.bad = _int(totals.get("fail")) + _int(totals.get("error"))
        self.skipped = _int(totals.get("skipped"))
        reserve = min(self.passes, max(1, cap // PASS_SHARE))
        self.bad_cap = cap - reserve
        self.skipped_cap = max(0, self.bad_cap - min(self.bad, self.bad_cap))
        self.pass_cap = max(0, min(self.passes, cap - min(self.bad, self.bad_cap) - min(self.skipped, self.skipped_cap)))
        self.bad_kept = self.skipped_kept = self.pass_kept = self.passes_seen = 0

    @classmethod
    def plan(cls, summary: RunSummary, max_cells: int | None) -> Sampling | None:
        """The sampling for a run of ``summary``'s cells under ``max_cells`` (None: :data:`MAX_CELLS`; 0: no cap); None when every cell fits."""
        cap = MAX_CELLS if max_cells is None else max_cells
        totals = summary.get("totals") or {}
        if cap <= 0 or _int(totals.get("cells")) <= cap:
            return None
        return cls(cap, totals)

    def keep(self, status: str) -> bool:
        """Whether the next cell, of ``status``, is embedded (counted as such when it is)."""
        if status == "pass":
            k = self.passes_seen
            self.passes_seen = k + 1
            if self.pass_kept < self.pass_cap and k * self.pass_cap % max(self.passes, 1) < self.pass_cap:
                self.pass_kept += 1
                return True
            return False
        if status == "skipped":
            if self.skipped_kept < self.skipped_cap:
                self.skipped_kept += 1
                return True
            return False
        if self.bad_kept < self.bad_cap:
            self.bad_kept += 1
            return True
        return False

    def view(self, run_id: str) -> JSONObject:
        """The figures the page's notice and script show."""
        return {
            "cells": self.cells,
            "cap": self.cap,
            "embedded": self.bad_kept + self.skipped_kept + self.pass_kept,
            "bad": self.bad,
            "bad_kept": self.bad_kept,
            "bad_cap": self.bad_cap,
            "skipped": self.skipped,
            "skipped_kept": self.skipped_kept,
            "passes": self.passes,
            "pass_kept": self.pass_kept,
            "command": f"evalx report {run_id or 'RUN'} --html-max-cells N",
        }


#: a case's optional texts: the key of the case row, the field of the cell
_CASE_NOTES = (("ds", "description"), ("nt", "notes"), ("cx", "context"))


class _CasesNotContiguous(Exception):
    """A case came back after another one started: number the cases with a full index instead."""


class _ReportData:
    """Everything the page needs, gathered in one pass over the results.

    With ``index_cases=False`` only the current case is remembered (matrix
    order keeps a case's cells together), plus the hashes of finished ones to
    notice when that does not hold (:class:`_CasesNotContiguous`).

    Every cell counts in the charts' aggregates; with a ``sample`` only the
    cells it keeps become rows (decided from the status before any row is
    built), and their cases are indexed (at most the cap of them).
    """

    def __init__(
        self, target_order: Iterable[str], *, spool_dir: Path | None = None, index_cases: bool = True, sample: Sampling | None = None
    ) -> None:
        self.embed = _Embedder()
        self.sample = sample
        self._thumb_bytes = 0  # bytes of images embedded as thumbnails so far
        # show_id of the targets and categories seen, by the stored string (few, and looked up for every cell)
        self.shown: dict[str, str] = {}
        self.targets: dict[str, int] = {}
        for target in target_order:
            self.targets.setdefault(show_id(target), len(self.targets))
        self.index_cases = index_cases
        self.cases: dict[tuple[str, str], int] = {}
        self.current_case: tuple[tuple[str, str], int] | None = None
        self.finished_cases: set[int] = set()
        self.case_rows = _Rows(spool_dir)
        self.cells = _Rows(spool_dir)
        self.max_repeat = 0
        # for the charts: (category, target) -> [passed, decided]; target -> latencies
        self.by_category: dict[str, dict[str, list[int]]] = {}
        self.latencies: dict[str, array[float]] = {}

    def close(self) -> None:
        self.case_rows.close()
        self.cells.close()

    def _case_index(self, result: CellResult, dataset: str, case_id: str) -> int:
        key = (dataset, case_id)
        if self.index_cases:
            c = self.cases.get(key)
            if c is None:
                c = self.cases[key] = self.case_rows.count
                self.case_rows.add(self._case(result, dataset, case_id))
            return c
        if self.current_case is not None:
            if self.current_case[0] == key:
                return self.current_case[1]
            self.finished_cases.add(hash(self.current_case[0]))
        if hash(key) in self.finished_cases:  # (a hash collision only costs the second pass)
            raise _CasesNotContiguous
        c = self.case_rows.count
        self.case_rows.add(self._case(result, dataset, case_id))
        self.current_case = (key, c)
        return c

    def _show(self, value: Any, default: str) -> str:
        if type(value) is str and value:
            shown = self.shown.get(value)
            if shown is None:
                shown = show_id(value)
                if len(self.shown) < 1000:
                    self.shown[value] = shown
            return shown
        return show_id(value or default)

    def add(self, result: CellResult) -> None:
        """Count ``result`` in the aggregates and, unless the sample leaves it out, embed it as a row."""
        raw_target, raw_category = result.get("target"), result.get("category")
        target = self._show(raw_target, "")
        t = self.targets.get(target)
        if t is None:
            t = self.targets[target] = len(self.targets)
        status = result.get("status")
        if status not in STATUSES:
            status = "error"  # an unknown status must never read as a pass
        # for the charts
        if status != "skipped":
            category = self._show(raw_category, "general")
            by_target = self.by_category.get(category)
            if by_target is None:
                by_target = self.by_category[category] = {}
            counts = by_target.get(target)
            if counts is None:  # (setdefault would build a dict and a list for every cell)
                counts = by_target[target] = [0, 0]
            if status == "pass":
                counts[0] += 1
            counts[1] += 1
            if target not in self.latencies:  # a chart row for every target with a decided cell
                self.latencies[target] = array("d")
        latency = finite(result.get("latency_ms"))
        if latency is None:
            output = result.get("output")
            latency = finite(output.get("latency_ms")) if isinstance(output, dict) else None
        if latency is not None and latency >= 0:
            values = self.latencies.get(target)
            if values is None:
                values = self.latencies[target] = array("d")
            values.append(latency)
        repeat = result.get("repeat")
        if type(repeat) is not int or repeat < 0:  # (read from JSON: no int but bool is a subclass)
            repeat = 0
        elif repeat > self.max_repeat:
            self.max_repeat = repeat
        if self.sample is not None and not self.sample.keep(status):
            return
        self._row(result, target, t, status, latency, repeat)

    def _row(self, result: CellResult, target: str, t: int, status: str, latency: float | None, repeat: int) -> None:
        dataset = self._show(result.get("dataset"), "")
        case_id = show_id(result.get("case_id") or "")
        c = self._case_index(result, dataset, case_id)
        output = result.get("output")
        output = output if isinstance(output, dict) else {}

        cell: JSONObject = {"c": c, "t": t, "s": status}
        if repeat:
            cell["r"] = repeat
        # the figures, in this key order (the embedded bytes depend on it)
        # (a figure the cell lacks is its output's; finite() is asked only about what is there)
        get, out = result.get, output.get
        score = get("score")
        if score is not None and (score := finite(score)) is not None:
            cell["sc"] = round(score, 3)
        if latency is not None:
            cell["ms"] = round(latency, 3)
        ttft = get("ttft_ms")
        if ttft is None:
            ttft = out("ttft_ms")
        if ttft is not None and (ttft := finite(ttft)) is not None:
            cell["tt"] = round(ttft, 3)
        cost = get("cost_usd")
        if cost is None:
            cost = out("cost_usd")
        if cost is not None and (cost := finite(cost)) is not None:
            cell["usd"] = round(cost, 8)
        judge_cost = get("judge_cost_usd")
        if judge_cost is not None and (judge_cost := finite(judge_cost)) is not None:
            cell["jusd"] = round(judge_cost, 8)
        iterations = out("iterations")
        if iterations is not None and (iterations := finite(iterations)) is not None:
            cell["it"] = round(iterations, 3)
        usage = out("usage")
        if isinstance(usage, dict):
            tokens: list[JSON] = [_int(usage.get("input_tokens")), _int(usage.get("output_tokens")), _int(usage.get("cache_hit_tokens"))]
            if any(tokens):
                cell["tk"] = tokens
        if get("cached"):
            cell["ca"] = 1
        stop = get("stop_reason")
        if isinstance(stop, str):
            cell["st"] = stop[:100]
            if get("truncated") is True:
                cell["tr"] = 1

        embed = self.embed
        put = embed.put
        put(cell, "x", out("text"), TEXT_CAP)
        put(cell, "rq", out("request"), REQUEST_CAP)
        calls = out("tool_calls")
        if isinstance(calls, list) and calls:
            kept: list[JSON] = []
            for call in calls[:MAX_TOOL_CALLS]:
                if isinstance(call, dict):
                    name = call.get("name", call.get("tool"))
                    kept.append(
                        [
                            embed.text(name if name is not None else "?", 200),
                            embed.text(call.get("args", call.get("arguments")), TOOL_CAP)
                            if call.get("args", call.get("arguments")) is not None
                            else None,
                            embed.text(call.get("result"), TOOL_CAP) if call.get("result") is not None else None,
                        ]
                    )
                else:
                    kept.append([embed.text(call, 200), None, None])
            cell["tc"] = kept
            if len(calls) > len(kept):
                cell["tcN"] = len(calls)
        assertions = result.get("assertions")
        checks: list[JSON] = []
        if isinstance(assertions, list) and assertions:
            checks = cell["a"] = [self._assertion(a) for a in assertions if isinstance(a, dict)]
        turns = result.get("turns")
        if isinstance(turns, list) and turns:
            # a turn's checks are embedded once: when the cell's own assertions carry their turn (as the runner
            # writes them), the page takes them from there
            self._turns(cell, turns, tagged=any(isinstance(a, list) and len(a) > 7 for a in checks))
        pairwise = result.get("pairwise")
        if isinstance(pairwise, list) and pairwise:
            compared: list[JSON] = [self._pairwise(p) for p in pairwise[:MAX_PAIRWISE] if isinstance(p, dict)]
            cell["pw"] = compared
        review = result.get("review")
        if isinstance(review, dict):  # a reviewer's mark (reviews.jsonl): [verdict, the run's status, reviewer, when, comment]
            mark: list[JSON] = [str(review.get(k) or "") for k in ("verdict", "original_status", "reviewer", "at")]
            mark.append(embed.text(review.get("comment") or "", REASON_CAP))
            cell["rv"] = mark
        error = get("error") or out("error")
        if error is not None:
            put(cell, "e", error, REASON_CAP)
        traceback = get("traceback") or out("traceback")
        if traceback is not None:
            put(cell, "tb", traceback, TEXT_CAP)
        events = out("events")
        if isinstance(events, list) and events:
            limit = LEAN_EVENTS if embed.lean else MAX_EVENTS
            if limit:
                cell["ev"] = [embed.text(_one_line_json(e), EVENT_CAP) for e in events[:limit]]
            if len(events) > limit or output.get("events_truncated"):
                cell["evN"] = len(events)
                if output.get("events_truncated"):
                    cell["evT"] = 1  # the target already dropped some
        trace = result.get("trace")
        if isinstance(trace, dict):
            self._waterfall(cell, trace)
        self.cells.add(cell)

    def _waterfall(self, cell: JSONObject, trace: Mapping[str, Any]) -> None:
        """``cell["tw"]``: a traced cell's spans as waterfall rows [name, start offset ms, duration ms, status, depth, key attributes]."""
        spans = [s for s in as_array(trace.get("spans")) if isinstance(s, dict)]
        cell["tid"] = self.embed.text(trace.get("trace_id"), 40)
        if not spans:
            cell["tw"] = []
            return
        starts = [_int(s.get("start_unix_nano")) for s in spans]
        t0 = min(starts)
        parents = {str(s.get("span_id")): str(s.get("parent_span_id")) for s in spans}
        rows: list[JSON] = []
        shown = LEAN_SPANS if self.embed.lean else MAX_SPANS  # a report of very many cells keeps each one small
        for span, start in zip(spans[:shown], starts, strict=False):
            depth, parent = 0, parents.get(str(span.get("span_id")))
            while parent in parents and depth < 32:
                depth, parent = depth + 1, parents[parent]
            attributes = span.get("attributes")
            keys = [f"{k}={_one_line_json(attributes[k])}" for k in SPAN_KEYS if isinstance(attributes, dict) and k in attributes]
            status = span.get("status")
            if status == "error" and span.get("status_message"):
                keys.append(f"error: {span.get('status_message')}")
            duration = finite(span.get("duration_ms"))
            rows.append(
                [
                    self.embed.text(span.get("name"), 200),
                    round((start - t0) / 1e6, 3),
                    round(duration, 3) if duration is not None else 0,
                    2 if status == "error" else 1 if status == "ok" else 0,
                    depth,
                    self.embed.text(" · ".join(keys), SPAN_CAP),
                ]
            )
        cell["tw"] = rows
        if len(spans) > len(rows) or trace.get("dropped"):
            cell["twN"] = len(spans) + _int(trace.get("dropped"))

    def _pairwise(self, record: PairwiseRecord | JSONObject) -> list[JSON]:
        """One pairwise comparison of the cell as the detail shows it: the other target, the verdict in words, the replies."""
        embed = self.embed
        replies: list[JSON] = [
            [embed.text(show_id(o.get("first")), 200), embed.text(o.get("reply"), REASON_CAP)]
            for o in as_array(record.get("orders"))
            if isinstance(o, dict) and o.get("reply")
        ]
        return [embed.text(show_id(record.get("against")), 200), embed.text(pairwise_verdict(record), REASON_CAP), replies]

    def _turns(self, cell: JSONObject, turns: list[Any], *, tagged: bool) -> None:
        """``cell["cv"]``: a conversation's turns, as the chat in the cell detail shows them.

        A turn's checks are embedded once: when ``tagged`` (the cell's own assertions carry
        their turn, as the runner writes them), the page takes them from there.
        """
        embed = self.embed
        kept: list[JSON] = []
        for turn in turns[:MAX_TURNS]:
            if not isinstance(turn, dict):
                continue
            output = turn.get("output")
            output = output if isinstance(output, dict) else {"text": output}
            row: JSONObject = {}
            embed.put(row, "i", turn.get("input"), TURN_CAP)
            embed.put(row, "o", output.get("text"), TURN_CAP)
            latency = finite(turn.get("latency_ms"))
            if latency is not None:
                row["ms"] = round(latency, 3)
            calls = turn.get("tool_calls")
            if not isinstance(calls, list):
                calls = output.get("tool_calls")
            if isinstance(calls, list) and calls:
                row["tc"] = [
                    [
                        embed.text(c.get("name", c.get("tool", "?")), 200),
                        embed.text(c.get("args"), TOOL_CAP) if c.get("args") is not None else None,
                        embed.text(c.get("result"), TOOL_CAP) if c.get("result") is not None else None,
                    ]
                    if isinstance(c, dict)
                    else [embed.text(c, 200), None, None]
                    for c in calls[:MAX_TOOL_CALLS]
                ]
            checks = turn.get("assertions")
            failed = False
            if isinstance(checks, list) and checks:
                failed = any(isinstance(a, dict) and (a.get("passed") is False or a.get("error")) for a in checks)
                if not tagged:  # else the page finds them among the cell's own, by their turn
                    row["a"] = [self._assertion(cast(AssertionRecord, a)) for a in checks if isinstance(a, dict)]
            embed.put(row, "e", output.get("error") or turn.get("error"), REASON_CAP)
            if failed or "e" in row:
                row["f"] = 1
            kept.append(row)
        cell["cv"] = kept
        if len(turns) > len(kept):
            cell["cvN"] = len(turns)

    def _case(self, result: CellResult, dataset: str, case_id: str) -> JSONObject:
        row: JSONObject = {"d": dataset, "id": case_id}
        category, difficulty = result.get("category"), result.get("difficulty")
        if category:
            row["cat"] = self._show(category, "")
        if difficulty is not None:
            row["dif"] = show_id(difficulty)
        tags = result.get("tags")
        if isinstance(tags, list) and tags:
            row["tags"] = [show_id(t) for t in tags[:50]]
        put, get = self.embed.put, result.get
        value = get("input")
        if type(value) is list and is_parts(value):  # images and documents: the text as the input, each attachment by name
            put(row, "in", parts_text(value), TEXT_CAP)
            listed: list[JSON] = [self._attachment(p) for p in value if isinstance(p, dict) and p.get("type") != "text"]
            row["att"] = listed[:MAX_ATTACHMENTS]
        elif value is not None:
            put(row, "in", value, TEXT_CAP)
        value = get("expected")
        if value is not None:
            put(row, "ex", value, TEXT_CAP)
        source = get("case_source")
        if source:
            row["src"] = clean_text(source)
        for key, field in _CASE_NOTES:  # only some cases have them
            value = get(field)
            if value is not None:
                put(row, key, value, TEXT_CAP)
        return row

    def _attachment(self, part: JSONObject) -> list[JSON]:
        """``[kind, name, media type, size, thumbnail]``: the thumbnail a ``data:`` URL of an image of at most
        :data:`THUMB_BYTES` whose bytes this process read (while the report's budget lasts), else "" (by reference)."""
        name = clean_text(part.get("path") or part.get("url") or f"inline {part.get('type')}")
        media = clean_text(part.get("media_type") or "")
        size = part.get("size") if isinstance(part.get("size"), int) else None
        thumb = ""
        digest = part.get("sha256")
        if (
            part.get("type") == "image"
            and media in THUMB_TYPES
            and isinstance(size, int)
            and size <= THUMB_BYTES
            and isinstance(digest, str)
        ):
            data = data_of(digest)
            if data is not None and self._thumb_bytes + size <= THUMBS_BUDGET:
                self._thumb_bytes += size
                thumb = f"data:{media};base64,{base64.b64encode(data).decode('ascii')}"
        return [clean_text(part.get("type")), name, media, size, thumb]

    def _assertion(self, a: AssertionRecord) -> list[JSON]:
        get, text = a.get, self.embed.text
        passed = get("passed")
        details = get("details")
        if isinstance(details, dict):
            # the judge's words are what a reader wants; figures like cost are elsewhere
            details = {k: v for k, v in details.items() if v not in (None, "", [], {})} or None
        name, score, reason, error = get("name"), get("score"), get("reason"), get("error")
        row: list[JSON] = [
            passed if isinstance(passed, bool) else None,
            text(get("type") or "assertion", 200),
            text(name, 200) if name else None,
            None if score is None else finite(score),
            text(reason, REASON_CAP) if reason else None,
            text(details, REASON_CAP) if details else None,
            text(error, REASON_CAP) if error else None,
        ]
        turn = get("turn")
        if type(turn) is int:
            row.append(turn)
        return row


def _one_line_json(event: Any) -> str:
    if isinstance(event, str):
        return event
    try:
        return json.dumps(event, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(event)


# ---------------------------------------------------------------- baseline


def _change(entry: Any) -> list[JSON] | None:
    """A newly failing / passing entry as [target, dataset, case_id]; strings are case ids."""
    if isinstance(entry, str):
        return [None, None, show_id(entry)]
    if isinstance(entry, dict):
        case_id = entry.get("case_id", entry.get("case", entry.get("id")))
        if case_id is None:
            return None
        target, dataset = entry.get("target"), entry.get("dataset")
        return [
            show_id(target) if target is not None else None,
            show_id(dataset) if dataset is not None else None,
            show_id(case_id),
        ]
    return None


def _relative(now: float | None, before: float | None) -> float | None:
    if now is None or before is None or before == 0:
        return None
    return (now - before) / before


def _baseline_view(baseline: BaselineView | None, summary: RunSummary) -> JSONObject | None:
    """The header's "versus baseline" block: deltas and case-level changes."""
    if not isinstance(baseline, dict):
        return None
    totals = summary.get("totals") or {}
    rate_now, rate_before = finite(totals.get("pass_rate")), finite(baseline.get("pass_rate"))
    cost_now, cost_before = finite(summary.get("cost_usd")), finite(baseline.get("cost_usd"))
    p99_now = finite((summary.get("latency_ms") or {}).get("p99"))
    p99_before = finite(baseline.get("p99_ms"))
    failing: list[JSON] = [c for c in map(_change, (baseline.get("newly_failing") or [])[:MAX_CHANGES]) if c]
    passing: list[JSON] = [c for c in map(_change, (baseline.get("newly_passing") or [])[:MAX_CHANGES]) if c]

    def label(change: list[JSON]) -> str:
        case = "/".join(x for x in change[1:] if isinstance(x, str) and x)
        return f"{case} · {change[0]}" if change[0] else case

    rate_delta = rate_now - rate_before if rate_now is not None and rate_before is not None else None
    return {
        "run_id": clean_text(baseline.get("run_id") or "baseline"),
        "pass_rate": _pct(rate_before),
        "pass_rate_delta": None if rate_delta is None else f"{rate_delta * 100:+.1f} pts",
        "pass_rate_tone": _tone(rate_delta, higher_is_better=True),
        "cost": _usd(cost_before),
        "cost_delta": _signed_pct(_relative(cost_now, cost_before)),
        "cost_tone": _tone(_relative(cost_now, cost_before), higher_is_better=False),
        "p99": _ms(p99_before),
        "p99_delta": _signed_pct(_relative(p99_now, p99_before)),
        "p99_tone": _tone(_relative(p99_now, p99_before), higher_is_better=False),
        "newly_failing": [label(c) for c in failing if isinstance(c, list)],
        "newly_passing": [label(c) for c in passing if isinstance(c, list)],
        "newly_failing_total": len(baseline.get("newly_failing") or []),
        "newly_passing_total": len(baseline.get("newly_passing") or []),
        "changes": {"failing": failing, "passing": passing},
    }


def _signed_pct(value: float | None) -> str | None:
    return None if value is None else f"{value * 100:+.1f}%"


def _tone(delta: float | None, *, higher_is_better: bool) -> str:
    if delta is None or abs(delta) < 1e-9:
        return "neutral"
    return "good" if (delta > 0) == higher_is_better else "bad"


# ---------------------------------------------------------------- rendering


def _template_file(name: str) -> str:
    return template_text("evalx.reports", name)


def template_text(package: str, name: str) -> str:
    """The text of ``name`` in ``package``'s ``templates/`` folder (evalx's own page templates, scripts and styles)."""
    return (resources.files(package) / "templates" / name).read_text(encoding="utf-8")


def page_environment(package: str) -> jinja2.Environment:
    """The one kind of Jinja2 environment evalx renders its own pages with (the HTML report, the viewer's pages).

    Templates are ``package``'s ``templates/`` files; every value is
    autoescaped (whatever the template's name), an undefined name is an
    error. Data reaches a page only through these templates: run ids, case
    ids, outputs and reasons are text in the page, never markup.
    """
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: template_text(package, name)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        bytecode_cache=template_cache(),
    )


def _environment() -> jinja2.Environment:
    env = page_environment("evalx.reports")
    env.filters.update(pct=_pct, ci=_ci, ms=_ms, usd=_usd, count=_count, duration=_duration, when=_when, num="{:,}".format)
    return env


def _when(iso: Any) -> str:
    """``2026-11-26T01:58:01+00:00`` as ``2026-11-26 01:58:01 UTC``."""
    if not isinstance(iso, str) or not iso:
        return "—"
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return clean_text(iso)
    zone = moment.tzname() or ""
    return moment.strftime("%Y-%m-%d %H:%M:%S") + (f" {'UTC' if zone in ('UTC', 'UTC+00:00') else zone}" if zone else "")


def _script(js: str) -> str:
    # Our own code goes inside <script> raw: it must not be able to close it.
    lowered = js.lower()
    if "</script" in lowered or "<!--" in lowered:
        raise ValueError("report.js must not contain '</script' or '<!--'")
    return js


def _scope(summary: RunSummary) -> JSONObject | None:
    """A shard's or a merge's note for the page's top: what part of the plan this run holds."""
    shard, merged = summary.get("shard"), summary.get("merged")
    if shard:
        return {
            "kind": "shard",
            "title": f"Shard {shard['index']}/{shard['count']} of a sharded run",
            "text": f"This run holds one shard of a plan of {shard['plan_cells']:,} cells; its gates and baseline are applied by `evalx merge` of every shard.",
        }
    if merged:
        done = f"Merged from {len(merged['shards'])} of {merged['count']} shards"
        if not merged["partial"]:
            return {"kind": "merged", "title": done, "text": "Every shard of the plan is in this run."}
        missing = ", ".join(f"{i}/{merged['count']}" for i in merged["missing"])
        return {
            "kind": "partial",
            "title": f"PARTIAL: {done}",
            "text": f"Shard{'s' if len(merged['missing']) > 1 else ''} {missing} missing: their cells are not in this run, and its figures cover only the shards merged.",
        }
    return None


def _config_shown(config: object) -> str:
    """The config's path as the header shows it: as the run recorded it (relative), or only its name if an older run
    recorded an absolute local path (a report is shared; the folders of the machine it ran on are nobody's business)."""
    text = str(config or "")
    return PurePath(text).name if PurePath(text).is_absolute() or PureWindowsPath(text).is_absolute() else text


class _InterruptedView(TypedDict):
    title: str
    why: str
    how: str
    command: str | None


def _interrupted(summary: RunSummary) -> _InterruptedView | None:
    """An interrupted run's notice, first on the page: how many of the planned cells ran, and the command that finishes it."""
    stopped = interruption(summary)
    if stopped is None:
        return None
    early = summary.get("stopped_early")
    if not summary.get("interrupted") and isinstance(early, str):  # --max-failures: its own words, without the command shown below
        why = "The run " + early.split(" (finish with:", 1)[0]
    else:
        why = "The run was stopped (Ctrl-C, SIGTERM, a CI cancel) before every planned cell ran"
    command = None if summary.get("merged") else resume_command(summary)
    return {"title": stopped[0], "why": why, "how": stopped[1], "command": command}


def _header(summary: RunSummary, data: _ReportData) -> _HeaderView:
    figures = summary.get("totals") or {}
    totals: CellCounts = {
        "cells": figures.get("cells", 0),
        "pass": figures.get("pass", 0),
        "fail": figures.get("fail", 0),
        "error": figures.get("error", 0),
        "skipped": figures.get("skipped", 0),
        "pass_rate": figures.get("pass_rate"),
        "pass_rate_ci": figures.get("pass_rate_ci"),
    }
    # data.targets holds ids as shown (show_id): look the figures up the same way
    per_target = {show_id(k): v for k, v in (summary.get("per_target") or {}).items()}
    repeats = summary.get("repeats")
    repeat_rows = repeats.get("per_target") if isinstance(repeats, dict) else None
    if isinstance(repeat_rows, dict):
        repeat_rows = {show_id(k): v for k, v in repeat_rows.items()}
    rows: list[_TargetRow] = []
    for index, target in enumerate(data.targets):
        # a target with results but no figures (a summary from elsewhere) shows zeros
        t: Mapping[str, Any] = per_target.get(target) or {}
        found = repeat_rows.get(target) if isinstance(repeat_rows, dict) else None
        rep: _RepeatRow | None = None
        if isinstance(found, dict):  # only what the table shows; tolerate fields a newer summary lacks
            rep = {
                "k": finite(found.get("k")),
                "pass_at_k": finite(found.get("pass_at_k")),
                "pass_hat_k": finite(found.get("pass_hat_k")),
                "flaky_cases": _int(found.get("flaky_cases")),
            }
        tokens = t.get("tokens") or {}
        latency = t.get("latency_ms") or {}
        rows.append(
            {
                "id": target,
                "color": _charts.color(index),
                "cells": t.get("cells", 0),
                "pass": t.get("pass", 0),
                "fail": t.get("fail", 0),
                "error": t.get("error", 0),
                "skipped": t.get("skipped", 0),
                "pass_rate": finite(t.get("pass_rate")),
                "pass_rate_ci": t.get("pass_rate_ci"),
                "p50": finite(latency.get("p50")),
                "p95": finite(latency.get("p95")),
                "p99": finite(latency.get("p99")),
                "ttft_p50": finite((t.get("ttft_ms") or {}).get("p50")),
                "ttft_p95": finite((t.get("ttft_ms") or {}).get("p95")),
                "tokens": _int(tokens.get("input")) + _int(tokens.get("output")),
                "tokens_text": tokens_shown(
                    _int(tokens.get("input")) + _int(tokens.get("output")), t.get("usage_unknown_cells"), t.get("cells")
                ),
                "cost": finite(t.get("cost_usd")),
                "cost_text": target_cost(finite(t.get("cost_usd")), t.get("cost_missing_cells")),
                "judge_cost": finite(t.get("judge_cost_usd")),
                "cost_per_pass": finite(t.get("cost_per_pass_usd")),
                "repeats": rep,
            }
        )
    status = "interrupted" if summary.get("interrupted") else "failing" if totals["fail"] or totals["error"] else "passing"
    tokens = summary.get("tokens") or {}
    return {
        "run_id": clean_text(summary.get("run_id") or ""),
        "name": clean_text(summary.get("name") or ""),
        "config": clean_text(_config_shown(summary.get("config"))),
        "interrupted": _interrupted(summary),
        "started_at": summary.get("started_at"),
        "duration_s": finite(summary.get("duration_s")),
        "status": status,
        "totals": totals,
        "targets": rows,
        "latency": {k: finite((summary.get("latency_ms") or {}).get(k)) for k in ("p50", "p95", "p99")},
        "ttft": {k: finite((summary.get("ttft_ms") or {}).get(k)) for k in ("p50", "p95", "p99")},
        # streaming targets (engines, providers with stream: true): a TTFT column in the targets table
        "has_ttft": any(row["ttft_p50"] is not None for row in rows),
        "scope": _scope(summary),
        "tokens": {k: _int(tokens.get(k)) for k in ("input", "output", "cache_hit")},
        "cache_hit_ratio": finite(summary.get("cache_hit_ratio")),
        "cached_cells": _int(summary.get("cached_cells")),
        "batched_cells": _int(summary.get("batched_cells")),
        "response_cache_hit_ratio": finite(summary.get("response_cache_hit_ratio")),
        "cost": finite(summary.get("cost_usd")),
        "judge_cost": finite(summary.get("judge_cost_usd")),
        "cost_missing": _int(summary.get("cost_missing_cells")),
        "cost_gaps": cost_gaps(summary.get("cost_missing_cells"), summary.get("usage_unknown_cells")),
        "tokens_text": tokens_shown(
            _int(tokens.get("input")) + _int(tokens.get("output")), summary.get("usage_unknown_cells"), totals["cells"]
        ),
        "inconclusive": _int(summary.get("inconclusive_assertions")),
        "reviewed": reviews_line(summary),
        "rate_limits": rate_limits_text(per_target),  # ids shown already
        "repeats": repeats if isinstance(repeats, dict) and repeats else None,
        "cells_planned": _int(summary.get("cells_planned")),
        # several targets are different models: the headline and the breakdowns are per target, the pooled rate a footnote
        "several": len(rows) > 1,
        "pooled_note": pooled_footnote(totals, len(rows)) if len(rows) > 1 and "pass_rate" in figures else None,
        "breakdowns": [b for b in (_breakdown_view(row, per_target.get(row["id"])) for row in rows) if b is not None],
        "output_sizes": _size_rows(per_target),
        "slowest": _slow_view(summary),
        "pairwise": html_pairwise([p for p in summary.get("pairwise") or [] if isinstance(p, dict)]),
        "disagreements": html_disagreements(summary.get("judge_disagreements")),
    }


def _size_rows(per_target: Mapping[str, TargetFigures]) -> list[_SizeRow]:
    """Output tokens, characters and latency (mean, p95) by difficulty, per target; [] without difficulties or figures."""
    rows: list[_SizeRow] = []
    for target_id, figures in per_target.items():
        for name, group in (figures.get("per_difficulty") or {}).items() if isinstance(figures, dict) else ():
            sizes = group.get("outputs") if isinstance(group, dict) else None
            if not isinstance(sizes, dict):
                continue
            shown = []
            for key in ("output_tokens", "output_chars", "latency_ms"):
                pair = sizes.get(key) or {}
                for stat in ("mean", "p95"):
                    value = finite(pair.get(stat)) if isinstance(pair, dict) else None
                    shown.append("—" if value is None else _ms(value) if key == "latency_ms" else f"{value:,.0f}")
            rows.append({"target": show_id(target_id), "difficulty": show_id(name), "figures": shown})
    return rows


def _slow_view(summary: RunSummary) -> _SlowView | None:
    """The slowest cells (those over ``defaults.slow_ms`` when it is set), or None before any cell had a latency."""
    slowest = summary.get("slowest")
    if not isinstance(slowest, dict) or not slowest.get("cells"):
        return None
    threshold, over = finite(slowest.get("threshold_ms")), slowest.get("over_threshold")
    head = f"{over:,} cells over slow_ms {_ms(threshold)}" if threshold is not None and isinstance(over, int) and over else "the slowest"
    rows: list[_SlowRow] = [
        {
            "target": show_id(c.get("target")),
            "case": cell_label(c.get("dataset"), c.get("case_id"), c.get("repeat")),
            "status": str(c.get("status") or ""),
            "latency": _ms(finite(c.get("latency_ms"))),
        }
        for c in slowest["cells"]
        if isinstance(c, dict)
    ]
    return {"head": head, "rows": rows}


def _breakdown_view(row: _TargetRow, figures: TargetFigures | None) -> _BreakdownView | None:
    """A target's category × difficulty table as the template shows it (texts ready), or None without the figures."""
    cross = cross_table(figures) if isinstance(figures, dict) else None
    if cross is None:
        return None
    return {
        "id": row["id"],
        "color": row["color"],
        "pass_rate": row["pass_rate"],
        "pass_rate_ci": row["pass_rate_ci"],
        "mean_score": score_text(cross.total.mean_score),
        "scored": cross.total.scored,
        "difficulties": [show_id(d) for d in cross.difficulties],
        "rows": [
            {
                "name": "all" if r is cross.total else show_id(r.name),
                "total": r is cross.total,
                "cells": [c.text() for c in r.cells],
                "all": r.all.text(),
                "mean_score": score_text(r.mean_score),
            }
            for r in [*cross.rows, cross.total]
        ],
    }


class HtmlStream:
    """report.html built from results given one at a time, in matrix order (what :func:`write_html`'s first pass does).

    :meth:`offer` takes a result and says False once the cases are not
    contiguous (a killed or resumed run's file); then nothing more is taken
    and :func:`write_html` must write the page from the file instead.
    """

    def __init__(self, summary: RunSummary, spool_dir: Path, *, max_cells: int | None = None) -> None:
        self.summary = summary
        self.data: _ReportData | None = _new_data(summary, spool_dir, max_cells, index_cases=False)

    def offer(self, result: CellResult) -> bool:
        if self.data is None:
            return False
        try:
            self.data.add(result)
        except _CasesNotContiguous:
            self.close()
            return False
        return True

    def write(self, out: Path, *, baseline: BaselineView | None = None) -> None:
        """Write the page to ``out`` from what was offered (every offer must have been taken)."""
        assert self.data is not None, "an offer was refused: write the page with write_html"
        _write_page(self.data, self.summary, out, baseline)

    def made_for(self, summary: RunSummary, max_cells: int | None) -> bool:
        """Whether what was offered makes the page ``summary`` would (the stream began before the run's summary existed).

        True when no cell was refused, the page embeds every cell under ``summary``'s totals too, and its targets
        came in ``summary``'s order; then the page is written with ``summary`` (:meth:`write`).
        """
        data = self.data
        if data is None or data.sample is not None or Sampling.plan(summary, max_cells) is not None:
            return False
        if list(data.targets) != [show_id(t) for t in summary.get("per_target") or {}]:
            return False
        self.summary = summary
        return True

    def close(self) -> None:
        if self.data is not None:
            self.data.close()
            self.data = None


def _new_data(summary: RunSummary, spool_dir: Path, max_cells: int | None, *, index_cases: bool) -> _ReportData:
    """What a page gathers: every cell, or past the cap the cells of a :class:`Sampling` (their cases indexed: at most the cap)."""
    sample = Sampling.plan(summary, max_cells)
    return _ReportData(summary.get("per_target") or {}, spool_dir=spool_dir, index_cases=index_cases or sample is not None, sample=sample)


def _gather(results_path: Path, summary: RunSummary, spool_dir: Path, max_cells: int | None) -> _ReportData:
    """One pass over ``results_path`` (two if its cases are not contiguous)."""
    data = _new_data(summary, spool_dir, max_cells, index_cases=False)
    if not results_path.exists():
        return data
    try:
        for result in read_results(results_path):
            if isinstance(result, dict):
                data.add(result)
        return data
    except _CasesNotContiguous:
        data.close()
    except BaseException:
        data.close()
        raise
    data = _new_data(summary, spool_dir, max_cells, index_cases=True)
    try:
        for result in read_results(results_path):
            if isinstance(result, dict):
                data.add(result)
    except BaseException:
        data.close()
        raise
    return data


def write_html(
    results_path: Path, summary: RunSummary, out: Path, *, baseline: BaselineView | None = None, max_cells: int | None = None
) -> None:
    """Write the self-contained HTML report of the run in ``results_path`` to ``out``.

    ``summary`` is the run's ``summary.json`` content; ``baseline``, when the
    run was compared with one, is ``{"run_id", "pass_rate", "cost_usd",
    "p99_ms", "newly_failing": [...], "newly_passing": [...]}`` (entries are
    ``{"target", "dataset", "case_id"}`` mappings or case ids). A run of more
    than ``max_cells`` cells (None: :data:`MAX_CELLS`; 0: no cap) is embedded
    as a :class:`Sampling`, and the page says so.
    """
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
    data = _gather(Path(results_path), summary, out.parent, max_cells)
    try:
        _write_page(data, summary, out, baseline)
    finally:
        data.close()


def _script_digest(js: str) -> bytes:
    return hashlib.sha256(js.encode("utf-8")).digest()


def report_script_source() -> str:
    """The CSP source that allows report.html's one script (``'sha256-…'``): what a server of the report may allow, and nothing else."""
    return "'sha256-" + base64.b64encode(_script_digest(_script(_template_file("report.js")))).decode("ascii") + "'"


def _write_page(data: _ReportData, summary: RunSummary, out: Path, baseline: BaselineView | None) -> None:
    header = _header(summary, data)
    versus = _baseline_view(baseline, summary)
    sample = data.sample.view(header["run_id"]) if data.sample is not None else None
    targets = list(data.targets)
    category_order = [show_id(c) for c in (summary.get("per_category") or {})]
    categories = category_order + [c for c in data.by_category if c not in category_order]
    per_target = {row["id"]: row for row in header["targets"]}
    charts = {
        "category": _charts.pass_rate_by_category(categories, targets, data.by_category),
        "latency": _charts.latency_distribution(targets, data.latencies),
        "cost": _charts.cost_per_target(
            targets,
            {t: per_target[t]["cost"] for t in targets},
            {t: per_target[t]["judge_cost"] for t in targets},
            {t: per_target[t]["tokens"] for t in targets},
        ),
    }
    # The payload is {"v", "run_id", "targets", "colors", "repeats", "lean", "cases", "cells", "changes"}:
    # encoded around the two spooled arrays, it is exactly embed_json() of the whole dict.
    head = embed_json(
        {
            "v": 1,
            "run_id": header["run_id"],
            "targets": targets,
            "colors": [_charts.color(i) for i in range(len(targets))],
            "repeats": data.max_repeat > 0,
            "lean": data.embed.lean,
            **({"sample": sample} if sample else {}),
        }
    )
    changes = embed_json(versus["changes"] if versus else None)
    js = _script(_template_file("report.js"))
    script_hash = _script_digest(js)  # our script only: the data is not code
    marker = f"\x00evalx-data-{uuid.uuid4().hex}\x00"  # cannot come out of the escaped page text
    page = (
        _environment()
        .get_template("report.html.j2")
        .render(
            h=header,
            baseline=versus,
            charts=charts,
            css=_template_file("report.css"),
            js=Markup(js),
            data_json=Markup(marker),
            script_hash=base64.b64encode(script_hash).decode("ascii"),
            version=__version__,
            case_count=data.case_rows.count,
            cell_count=data.cells.count,
            sample=sample,
        )
    )
    before, found, after = page.partition(marker)
    if not found or marker in after:
        raise RuntimeError("report.html.j2 must place data_json exactly once")
    # a unique name beside ``out``, renamed over it; a full disk, a read-only folder: OutputError naming the file
    with atomic_write(out, errors="replace", newline="\n") as f:
        f.write(before)
        f.write(head[:-1] + ',"cases":[')
        data.case_rows.copy_to(f)
        f.write('],"cells":[')
        data.cells.copy_to(f)
        f.write('],"changes":' + changes + "}")
        f.write(after)
