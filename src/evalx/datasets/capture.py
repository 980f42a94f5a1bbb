"""Production to eval: turn a failing trace into a regression case file.

Three sources, each read into a :class:`Trace`:

- a trace summary JSON (``trace_id``, ``user_message``, ``system``,
  ``final_answer``, ``failure_reason``, ``tokens_used``), one object or a list;
- an Engine SSE transcript (``event:``/``data:`` lines: ``text_delta``,
  ``tool_call``, ``usage``, ``error``);
- a cell of a stored run (``runs/<id>`` with ``--case``).

Each becomes one YAML case a file (the dataset loader's directory mode loads
a folder of them): an id from the trace id, the input, a ``max_tokens``
budget of 1.5 × the tokens used, a ``not contains`` of the bad answer where
one is known, and a comment with the failure reason for a person to refine.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from evalx.errors import EvalxError

if TYPE_CHECKING:
    from evalx.results.model import CellOutput

__all__ = ["CaptureError", "Trace", "capture_all", "case_from_trace", "read_traces", "write_case"]

#: a budget of this many times the tokens the failing trace used
TOKEN_BUDGET_FACTOR = 1.5
#: a bad answer longer than this is not quoted whole in `not contains` (its first part is)
MAX_ANSWER_CHARS = 500
PLACEHOLDER_INPUT = "TODO: the user message that produced this trace"


class CaptureError(EvalxError):
    """A trace could not be read or turned into a case."""


@dataclass
class Trace:
    trace_id: str
    user_message: Any = None
    system: str | None = None
    final_answer: str | None = None
    failure_reason: str | None = None
    tokens_used: int = 0
    tool_calls: list[str] = field(default_factory=list)
    source: str = ""
    case_id: str | None = None  # set for a run's cell: the id is derived from it


# ---------------------------------------------------------------- reading


def _clean(text: Any) -> str:
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", " ", str(text))


def _from_summary(d: dict[str, Any], source: str) -> Trace:
    trace_id = d.get("trace_id")
    if not isinstance(trace_id, (str, int)) or not str(trace_id):
        raise CaptureError(f"{source}: a trace summary needs a 'trace_id'")
    message = d.get("user_message", d.get("input"))
    if message is None:
        raise CaptureError(f"{source}: trace {trace_id} has no 'user_message'")
    tokens = d.get("tokens_used") or 0
    return Trace(
        trace_id=str(trace_id),
        user_message=message,
        system=d.get("system") if isinstance(d.get("system"), str) else None,
        final_answer=d.get("final_answer") if isinstance(d.get("final_answer"), str) else None,
        failure_reason=str(d["failure_reason"]) if d.get("failure_reason") else None,
        tokens_used=int(tokens) if isinstance(tokens, (int, float)) and not isinstance(tokens, bool) else 0,
        source=source,
    )


def _looks_like_sse(text: str) -> bool:
    return any(line.startswith(("event:", "data:")) for line in text.splitlines()[:50])


def _from_sse(text: str, source: str, stem: str) -> Trace:
    from evalx.targets.transport.sse import SSEDecoder

    decoder = SSEDecoder()
    events = decoder.feed(text + "\n\n")  # a transcript may end without the final blank line
    if not events:
        raise CaptureError(f"{source}: no SSE events found")
    parts: list[str] = []
    tools: list[str] = []
    tokens = 0
    failure = None
    trace_id = None
    message = None
    for ev in events:
        try:
            data = json.loads(ev.data) if ev.data else {}
        except ValueError:
            data = {"text": ev.data}
        if not isinstance(data, dict):
            data = {"value": data}
        trace_id = trace_id or data.get("trace_id") or data.get("task_id") or ev.id or None
        message = message or data.get("user_message")
        if ev.event == "text_delta":
            parts.append(str(data.get("text", "")))
        elif ev.event == "tool_call":
            name = data.get("tool") or data.get("name")
            if name:
                tools.append(str(name))
        elif ev.event == "usage":
            for k in ("input_tokens", "output_tokens"):
                v = data.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    tokens += int(v)
        elif ev.event == "error":
            code, msg = data.get("code"), data.get("message")
            failure = ": ".join(str(x) for x in (code, msg) if x) or "error event"
    return Trace(
        trace_id=str(trace_id or stem),
        user_message=message,
        final_answer="".join(parts) or None,
        failure_reason=failure,
        tokens_used=tokens,
        tool_calls=tools,
        source=source,
    )


def _from_run(run_dir: Path, case_id: str, target: str | None) -> Trace:
    from evalx.results.model import failure_reason
    from evalx.results.store import RESULTS, read_results

    if not (run_dir / RESULTS).is_file():
        raise CaptureError(f"{run_dir}: not a run directory (no {RESULTS})")
    cells = [r for r in read_results(run_dir / RESULTS) if r.get("case_id") == case_id and (target is None or r.get("target") == target)]
    if not cells:
        which = f" on target {target!r}" if target else ""
        raise CaptureError(f"{run_dir}: no cell of case {case_id!r}{which}")
    failing = [r for r in cells if r.get("status") in ("fail", "error")]
    cell = (failing or cells)[0]
    raw_output = cell.get("output")
    output: CellOutput = raw_output if isinstance(raw_output, dict) else {}
    raw_usage = output.get("usage")
    usage: Mapping[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    tokens: int = sum(int(usage.get(k) or 0) for k in ("input_tokens", "output_tokens"))
    run_id = str(cell.get("run_id") or run_dir.name)
    return Trace(
        trace_id=f"{run_id}/{cell.get('target')}/{case_id}/r{cell.get('repeat', 0)}",
        user_message=cell.get("input"),
        final_answer=output.get("text") or None,
        failure_reason=failure_reason(cell) if cell.get("status") in ("fail", "error") else None,
        tokens_used=tokens,
        tool_calls=[str(c["name"]) for c in output.get("tool_calls") or [] if isinstance(c, dict) and c.get("name")],
        source=f"{run_dir.name} {cell.get('target')} {cell.get('dataset')}/{case_id}",
        case_id=case_id,
    )


def read_traces(path: Path, *, cases: list[str] | None = None, target: str | None = None) -> Iterator[Trace]:
    """The traces in ``path`` (a summary JSON, an SSE transcript, or a run directory with ``cases``)."""
    if path.is_dir():
        if not cases:
            raise CaptureError(f"{path} is a run directory: name the cell with --case CASE")
        for case_id in cases:
            yield _from_run(path, case_id, target)
        return
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise CaptureError(f"{path}: cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        yield _from_summary(data, str(path))
    elif isinstance(data, list):
        for i, item in enumerate(data):
            if not isinstance(item, dict):
                raise CaptureError(f"{path}[{i}]: a trace summary must be an object")
            yield _from_summary(item, f"{path}[{i}]")
    elif _looks_like_sse(text):
        yield _from_sse(text, str(path), path.stem)
    else:
        raise CaptureError(f"{path}: not a trace summary JSON, an SSE transcript or a run directory")


# ---------------------------------------------------------------- writing


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "case"


def case_id_for(trace: Trace) -> str:
    if trace.case_id is not None:  # a run's cell: keep its case id recognisable
        digest = hashlib.sha256(trace.trace_id.encode()).hexdigest()[:6]
        return f"regression-{_slug(trace.case_id)}-{digest}"
    return f"prod-regression-{_slug(trace.trace_id)[:8]}"


def case_from_trace(trace: Trace, *, input_text: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The case mapping for ``trace``, and warnings for what a person must fill in."""
    warnings: list[str] = []
    message = trace.user_message if trace.user_message is not None else input_text
    if message is None:
        message = PLACEHOLDER_INPUT
        warnings.append(f"{trace.source}: the trace has no user message; edit `input:` (or pass --input)")
    reason = trace.failure_reason or "unknown"
    case: dict[str, Any] = {
        "id": case_id_for(trace),
        "description": f"regression from production: {_clean(reason)}"[:300],
        "input": message,
    }
    if trace.system:
        case["system"] = trace.system
    case["category"] = "regression"
    case["tags"] = ["regression", "production" if trace.case_id is None else "captured"]
    asserts: list[dict[str, Any]] = []
    if trace.tokens_used > 0:
        asserts.append({"type": "max_tokens", "value": int(trace.tokens_used * TOKEN_BUDGET_FACTOR), "count": "total"})
    answer = (trace.final_answer or "").strip()
    if answer:
        asserts.append({"type": "contains", "value": answer[:MAX_ANSWER_CHARS], "not": True, "name": "not the bad answer"})
    else:
        asserts.append({"type": "completed"})  # it crashed or said nothing: finishing is the first bar
    case["assert"] = asserts
    case["metadata"] = {
        "trace_id": trace.trace_id,
        "failure_reason": trace.failure_reason,
        "tokens_used": trace.tokens_used,
        "captured_from": trace.source,
        "captured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if trace.tool_calls:
        case["metadata"]["tool_calls"] = trace.tool_calls
    return case, warnings


def _comment(lines: list[str]) -> str:
    return "".join(f"# {_clean(line)}\n" if line else "#\n" for line in lines)


def write_case(case: dict[str, Any], trace: Trace, out_dir: Path, *, force: bool = False) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{case['id']}.yaml"
    if path.exists() and not force:
        raise CaptureError(f"{path} already exists (use --force to overwrite)")
    reason = (trace.failure_reason or "unknown").splitlines() or ["unknown"]
    header = _comment(
        [
            f"Captured by `evalx capture` from {trace.source}",
            f"Failure reason: {reason[0]}",
            *[f"  {line}" for line in reason[1:10]],
            "",
            "TODO for a person: this case only checks that the same failure does not recur",
            "(the bad answer is not repeated, the token budget is 1.5x what the trace used).",
            "Refine it: assert the specific behaviour you expect (must_call_tools, contains,",
            "llm_judge with a rubric...), then commit it to the suite.",
        ]
    )
    body = yaml.safe_dump(case, sort_keys=False, allow_unicode=True, width=100)
    path.write_text(header + body, encoding="utf-8")
    return path


def _check_loads(path: Path) -> None:
    """The written case must load as a dataset file, as is."""
    from evalx.datasets.loader import load_dataset
    from evalx.errors import DatasetError

    try:
        load_dataset({"id": "captured", "path": path.name}, base_dir=path.parent)
    except DatasetError as exc:  # a bug here, never the user's: say so plainly
        raise CaptureError(f"{path}: the captured case does not load: {exc}") from None


def capture_all(
    paths: list[Path],
    out_dir: Path,
    *,
    cases: list[str] | None = None,
    target: str | None = None,
    input_text: str | None = None,
    force: bool = False,
) -> Iterator[tuple[Path, list[str]]]:
    """Write one case file a trace; yield each file written with its warnings."""
    for path in paths:
        for trace in read_traces(path, cases=cases, target=target):
            case, warnings = case_from_trace(trace, input_text=input_text)
            written = write_case(case, trace, out_dir, force=force)
            _check_loads(written)
            yield written, warnings
