"""Production to eval: turn a failing trace into a regression case file.

Three sources, each read into a :class:`Trace`:

- a trace summary JSON (``trace_id``, ``user_message``, ``system``,
  ``final_answer``, ``failure_reason``, ``tokens_used``), one object or a list;
- an Engine SSE transcript (``event:``/``data:`` lines: ``text_delta``,
  ``tool_call``, ``usage``, ``error``);
- a cell of a stored run (``runs/<id>`` with ``--case``);
- an OpenTelemetry export: OTLP/JSON (a collector's file exporter, one
  request a line, or one document), Phoenix's or Jaeger's JSON
  (:mod:`evalx.datasets.otel_traces`), one case a trace.

Each becomes one YAML case a file (the dataset loader's directory mode loads
a folder of them): an id from the trace id, the input, a ``max_tokens``
budget of 1.5 × the tokens used, a ``not contains`` of the bad answer where
one is known, and a comment with the failure reason for a person to refine.
A trace of an OpenTelemetry export that did not fail is a reference instead
(``golden``): its final answer is the case's ``expected:``, its tool calls
the golden trajectory (``trajectory_match``), named ``prod-trace-<trace id>``.

Names are unique per trace (:func:`plan_names`): the whole trace id when it
is a short lower-case slug, else a slug of it and a digest; a batch never
writes two traces to one file, and ``--force`` only ever overwrites a file
that is not another trace's capture. A batch checks every name before it
writes anything. What is written is YAML by construction
(:func:`dump_case`): strings YAML would read back differently (line breaks
U+0085/U+2028/U+2029, control characters, a BOM, lone surrogates) are
double-quoted with escapes, comments are escaped to one line each, and the
text is read back with evalx's own loader and compared before it is written.
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

from evalx.common.atomic import write_bytes, write_text
from evalx.common.json_types import JSON, JSONObject
from evalx.common.reading import DATASET, TRACE, check_regular, read_text
from evalx.errors import CaptureError, UnreadableFile

if TYPE_CHECKING:
    from evalx.results.model import CellOutput

__all__ = ["CaptureError", "Trace", "capture_all", "case_from_trace", "dump_case", "plan_names", "read_traces", "write_case"]

#: a budget of this many times the tokens the failing trace used
TOKEN_BUDGET_FACTOR = 1.5
#: a bad answer longer than this is not quoted whole in `not contains` (its first part is)
MAX_ANSWER_CHARS = 500
PLACEHOLDER_INPUT = "TODO: the user message that produced this trace"
#: the most characters of a trace id (or case id) kept in a case name; a longer one is cut and given a digest
MAX_NAME_ID = 64
#: digest characters appended to a name that does not carry its trace id whole
DIGEST_CHARS = 10


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
    context: Any = None  # the case's retrieved passages, when it had some
    #: the folders an input part's ``path`` may be relative to (a run's cell: its case file's folder, as the run saw it)
    attachment_dirs: list[Path] = field(default_factory=list)
    #: a trace that went well (an OpenTelemetry export without an error span): its answer and tool calls are the reference
    golden: bool = False
    #: the arguments of each of ``tool_calls``, when the trace has them
    tool_args: list[Any] = field(default_factory=list)


# ---------------------------------------------------------------- reading


def _clean(text: Any) -> str:
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", " ", str(text))


def _from_summary(d: JSONObject, source: str) -> Trace:
    trace_id = d.get("trace_id")
    if not isinstance(trace_id, (str, int)) or not str(trace_id):
        raise CaptureError(f"{source}: a trace summary needs a 'trace_id'")
    message = d.get("user_message", d.get("input"))
    if message is None:
        raise CaptureError(f"{source}: trace {trace_id} has no 'user_message'")
    tokens = d.get("tokens_used") or 0
    system, final_answer = d.get("system"), d.get("final_answer")
    return Trace(
        trace_id=str(trace_id),
        user_message=message,
        system=system if isinstance(system, str) else None,
        final_answer=final_answer if isinstance(final_answer, str) else None,
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


def _from_run(run_dir: Path, case_id: str, target: str | None, reviewed: bool = False) -> Trace:
    from evalx.results.model import failure_reason
    from evalx.results.store import RESULTS, read_results

    try:
        check_regular(run_dir / RESULTS)
    except UnreadableFile as exc:  # missing: not a run; a FIFO or a device there: named, never read
        raise CaptureError(f"{run_dir}: not a run directory (no {RESULTS})" if exc.missing else str(exc)) from None
    cells = [r for r in read_results(run_dir / RESULTS) if r.get("case_id") == case_id and (target is None or r.get("target") == target)]
    if not cells:
        which = f" on target {target!r}" if target else ""
        raise CaptureError(f"{run_dir}: no cell of case {case_id!r}{which}")
    if reviewed:  # a cell a reviewer marked failing (reviews.jsonl), whatever the run said
        cells = [r for r in cells if isinstance(r.get("review"), dict) and r["review"].get("verdict") == "fail"]
        if not cells:
            which = f" on target {target!r}" if target else ""
            raise CaptureError(f"{run_dir}: no cell of case {case_id!r}{which} is reviewed as failing (mark it in `evalx view` first)")
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
        failure_reason=_reviewed_reason(cell) or (failure_reason(cell) if cell.get("status") in ("fail", "error") else None),
        tokens_used=tokens,
        tool_calls=[str(c["name"]) for c in output.get("tool_calls") or [] if isinstance(c, dict) and c.get("name")],
        source=f"{run_dir.name} {cell.get('target')} {cell.get('dataset')}/{case_id}",
        case_id=case_id,
        context=cell.get("context"),
        attachment_dirs=_case_dirs(run_dir, cell.get("case_source")),
    )


def _case_dirs(run_dir: Path, source: object) -> list[Path]:
    """Where the files a cell's input parts name may be: its case file's folder, below the config's folder (the
    folder ``runs/`` is in, by default) or the working folder."""
    if not isinstance(source, str) or not source:
        return []
    folder = Path(source.rpartition(":")[0] or source).parent
    return [run_dir.parent.parent / folder, Path.cwd() / folder]


def _keep_attachments(case: JSONObject, trace: Trace, out_dir: Path, warnings: list[str]) -> None:
    """A captured input of parts, loadable beside the case: each file the run read copied to ``attachments/`` (checked
    against the digest the run recorded) and named from there; a part whose bytes cannot be found is left out, with a warning."""
    from evalx.common.attachments import is_parts
    from evalx.common.reading import ATTACHMENT, read_bytes

    value = case.get("input")
    if not is_parts(value):
        return
    assert isinstance(value, list)
    kept: list[JSON] = []
    for part in value:
        assert isinstance(part, dict)
        kind = part["type"]
        if kind == "text":
            kept.append({"type": "text", "text": part.get("text", "")})
            continue
        if isinstance(part.get("url"), str):
            kept.append({k: v for k, v in part.items() if k in ("type", "url", "media_type")})
            continue
        path, digest = part.get("path"), part.get("sha256")
        data = None
        for folder in trace.attachment_dirs if isinstance(path, str) else ():
            try:
                found = read_bytes(folder / str(path), ATTACHMENT)
            except OSError:
                continue
            if hashlib.sha256(found).hexdigest() == digest:
                data = found
                break
        if data is None:
            what = f"{kind} {path!r}" if isinstance(path, str) else f"an inline {kind}"
            warnings.append(f"{trace.source}: {what} (sha256 {str(digest)[:16]}…) was not found as the run read it: left out of the case")
            continue
        suffix = Path(str(path)).suffix.lower()
        name = f"attachments/{str(digest)[:16]}{suffix}"
        (out_dir / "attachments").mkdir(parents=True, exist_ok=True)
        target = out_dir / name
        if not target.is_file() or target.is_symlink():  # (a link there is replaced, never written through)
            write_bytes(target, data)
        kept.append({"type": kind, "path": name, "media_type": part.get("media_type")})
    case["input"] = kept if kept else PLACEHOLDER_INPUT


def _reviewed_reason(cell: Mapping[str, Any]) -> str | None:
    """A reviewed-failing cell's reason: the reviewer's comment (who, and what the run said)."""
    review = cell.get("review")
    if not isinstance(review, dict) or review.get("verdict") != "fail":
        return None
    comment = str(review.get("comment") or "").strip() or "marked failing"
    return f"reviewed by {review.get('reviewer') or 'a reviewer'}: {comment} (the run said {review.get('original_status')})"


def read_traces(path: Path, *, cases: list[str] | None = None, target: str | None = None, reviewed: bool = False) -> Iterator[Trace]:
    """The traces in ``path`` (a summary JSON, an SSE transcript, or a run directory with ``cases``)."""
    if path.is_dir():
        if not cases:
            raise CaptureError(f"{path} is a run directory: name the cell with --case CASE")
        for case_id in cases:
            yield _from_run(path, case_id, target, reviewed)
        return
    try:  # a regular file only (a FIFO or a device is refused, never read), at most TRACE's size
        text = read_text(path, TRACE, encoding="utf-8-sig")
    except UnreadableFile as exc:
        raise CaptureError(f"{path}: cannot read: {exc.reason}") from None
    try:
        data = json.loads(text)
    except ValueError:
        data = _json_lines(text)
    from evalx.datasets.otel_traces import looks_like_otel

    if isinstance(data, list) and data and isinstance(data[0], _Lines):  # JSONL: a collector's file exporter
        if not looks_like_otel(data[0].document):
            raise CaptureError(f"{path}: JSON lines, but not an OpenTelemetry export (OTLP/JSON, Phoenix or Jaeger spans)")
        yield from _from_otel([line.document for line in data], path)
    elif looks_like_otel(data):
        yield from _from_otel([data], path)
    elif isinstance(data, dict):
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


@dataclass(frozen=True, slots=True)
class _Lines:
    """One line of a JSON-lines file, read."""

    document: Any


def _json_lines(text: str) -> list[_Lines] | None:
    """Each non-empty line of ``text`` as JSON, or None when a line is not JSON (or there is one line or none)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 1:
        return None
    out = []
    for line in lines:
        try:
            out.append(_Lines(json.loads(line)))
        except ValueError:
            return None
    return out


def _from_otel(documents: list[Any], path: Path) -> Iterator[Trace]:
    from evalx.datasets.otel_traces import read_otel, trace_facts

    facts = trace_facts(read_otel(documents))
    if not facts:
        raise CaptureError(f"{path}: an OpenTelemetry export without spans")
    for trace in facts:
        yield Trace(
            trace_id=trace.trace_id,
            user_message=trace.user_message,
            system=trace.system,
            final_answer=trace.final_answer,
            failure_reason=trace.failure_reason,
            tokens_used=trace.tokens_used,
            tool_calls=trace.tool_calls,
            source=f"{path} trace {trace.trace_id}",
            golden=trace.failure_reason is None,
            tool_args=trace.tool_args,
        )


# ---------------------------------------------------------------- writing


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "case"


#: a name that ends like a digest is given one (so a plain name never equals another trace's digest name)
_ENDS_LIKE_DIGEST = re.compile(rf"-[0-9a-f]{{{DIGEST_CHARS}}}(-\d+)?$")


def case_names(trace: Trace) -> Iterator[str]:
    """The names ``trace`` may take, best first (each further one for when the earlier are taken).

    ``prod-regression-<trace id>`` when the trace id is already a short
    lower-case slug (on a case-insensitive disk ``Req-1`` and ``req-1`` are one
    file); else the slug cut to :data:`MAX_NAME_ID` and a digest of the whole
    trace id; then that with ``-2``, ``-3``... A run's cell is named
    ``regression-<case id>-<digest>``.
    """
    digest = hashlib.sha256(trace.trace_id.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]
    if trace.case_id is not None:  # a run's cell: keep its case id recognisable
        base = f"regression-{_slug(trace.case_id)[:MAX_NAME_ID].rstrip('-.')}"
    else:
        prefix = "prod-trace-" if trace.golden else "prod-regression-"
        base = prefix + _slug(trace.trace_id)[:MAX_NAME_ID].rstrip("-.")
        if base == prefix + trace.trace_id and trace.trace_id == trace.trace_id.lower() and not _ENDS_LIKE_DIGEST.search(base):
            yield base
    yield f"{base}-{digest}"
    n = 2
    while True:
        yield f"{base}-{digest}-{n}"
        n += 1


def case_id_for(trace: Trace) -> str:
    return next(case_names(trace))


def _owner(path: Path) -> str | None:
    """The trace id an existing case file says it was captured from (None: not a capture, or unreadable)."""
    from evalx.common.documents import DocumentError, load_yaml

    try:
        data = load_yaml(read_text(path, DATASET, encoding="utf-8-sig"), path.name, interpolate=False).data
    except (OSError, DocumentError):
        return None
    meta = data.get("metadata") if isinstance(data, dict) else None
    owner = meta.get("trace_id") if isinstance(meta, dict) else None
    return str(owner) if owner is not None else None


def plan_names(traces: list[Trace], out_dir: Path, *, force: bool = False) -> list[Path]:
    """A file for each trace, all different: check every name before anything is written.

    A name already taken in this batch, or by an existing file that says it
    is another trace's capture, moves the trace to its next name. An
    existing file of the same trace (or a file that does not say) is
    overwritten with ``force``; without it, every such file is listed in one
    error and nothing is written.
    """
    taken: set[str] = set()
    paths: list[Path] = []
    clashes: list[Path] = []
    for trace in traces:
        for name in case_names(trace):
            path = out_dir / f"{name}.yaml"
            if name.casefold() in taken:
                continue
            if path.exists():
                owner = _owner(path)
                if owner is not None and owner != trace.trace_id:
                    continue  # another trace's capture: never overwritten
                if not force:
                    clashes.append(path)
            taken.add(name.casefold())
            paths.append(path)
            break
    if clashes:
        shown = ", ".join(str(p) for p in clashes[:5]) + (f" and {len(clashes) - 5} more" if len(clashes) > 5 else "")
        raise CaptureError(f"{shown} already exist{'s' if len(clashes) == 1 else ''} (use --force to overwrite); nothing was written")
    return paths


def case_from_trace(trace: Trace, *, input_text: str | None = None) -> tuple[JSONObject, list[str]]:
    """The case mapping for ``trace``, and warnings for what a person must fill in."""
    warnings: list[str] = []
    message = trace.user_message if trace.user_message is not None else input_text
    if message is None:
        message = PLACEHOLDER_INPUT
        warnings.append(f"{trace.source}: the trace has no user message; edit `input:` (or pass --input)")
    if trace.golden:
        return _reference_case(trace, message), warnings
    reason = trace.failure_reason or "unknown"
    case: JSONObject = {
        "id": case_id_for(trace),  # capture_all renames it to its file's name
        "description": f"regression from production: {_clean(reason)}"[:300],
        "input": message,
    }
    if trace.system:
        case["system"] = trace.system
    if trace.context is not None:
        case["context"] = trace.context
    case["category"] = "regression"
    case["tags"] = ["regression", "production" if trace.case_id is None else "captured"]
    asserts: list[JSON] = []
    if trace.tokens_used > 0:
        asserts.append({"type": "max_tokens", "value": int(trace.tokens_used * TOKEN_BUDGET_FACTOR), "count": "total"})
    answer = (trace.final_answer or "").strip()
    if answer:
        asserts.append({"type": "contains", "value": answer[:MAX_ANSWER_CHARS], "not": True, "name": "not the bad answer"})
    else:
        asserts.append({"type": "completed"})  # it crashed or said nothing: finishing is the first bar
    case["assert"] = asserts
    metadata: JSONObject = {
        "trace_id": trace.trace_id,
        "failure_reason": trace.failure_reason,
        "tokens_used": trace.tokens_used,
        "captured_from": trace.source,
        "captured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if trace.tool_calls:
        calls: list[JSON] = list(trace.tool_calls)
        metadata["tool_calls"] = calls
    case["metadata"] = metadata
    return case, warnings


def _reference_case(trace: Trace, message: Any) -> JSONObject:
    """A trace that went well: its answer is ``expected:``, its tool calls the golden trajectory."""
    case: JSONObject = {"id": case_id_for(trace), "description": "reference from a production trace", "input": message}
    if trace.system:
        case["system"] = trace.system
    answer = (trace.final_answer or "").strip()
    if answer:
        case["expected"] = answer
    case["category"] = "production"
    case["tags"] = ["production", "captured"]
    asserts: list[JSON] = [{"type": "completed"}]
    if trace.tool_calls:
        tools: list[JSON] = list(trace.tool_calls)
        asserts.append({"type": "trajectory_match", "tools": tools, "mode": "in_order", "name": "the production trajectory"})
    if trace.tokens_used > 0:
        asserts.append({"type": "max_tokens", "value": int(trace.tokens_used * TOKEN_BUDGET_FACTOR), "count": "total"})
    case["assert"] = asserts
    metadata: JSONObject = {
        "trace_id": trace.trace_id,
        "tokens_used": trace.tokens_used,
        "captured_from": trace.source,
        "captured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if trace.tool_calls:
        metadata["tool_calls"] = [{"name": name, "args": args} for name, args in zip(trace.tool_calls, _padded(trace.tool_args, trace))]
    case["metadata"] = metadata
    return case


def _padded(args: list[Any], trace: Trace) -> list[JSON]:
    return [*args, *([{}] * (len(trace.tool_calls) - len(args)))]


# ---------------------------------------------------------------- YAML out

#: characters a YAML reader would not give back as written in a plain or single-quoted string (or in a comment):
#: YAML's own line breaks (U+0085, U+2028, U+2029), a BOM, and everything outside YAML's printable set
_NOT_VERBATIM = re.compile("[^\t\n\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\x85\u2028\u2029\ufeff]")
_NOT_IN_COMMENT = re.compile("[^\t\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\x85\u2028\u2029\ufeff]")


def _escaped(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape", "backslashreplace").decode("ascii")


def comment_text(text: str) -> str:
    """``text`` fit for one YAML comment line: every line break and unprintable character as its escape (``\\u2028``)."""
    return _NOT_IN_COMMENT.sub(_escaped, text)


class _CaseDumper(yaml.SafeDumper):
    """``yaml.safe_dump`` with every string that holds a character of :data:`_NOT_VERBATIM` double-quoted.

    PyYAML itself writes U+0085 raw inside single quotes, where a reader
    folds it into a space; double quotes escape it (``\\N``).
    """


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if _NOT_VERBATIM.search(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_CaseDumper.add_representer(str, _represent_str)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, default=repr)


def dump_case(case: JSONObject, header: str = "", *, name: str = "case.yaml") -> str:
    """``header`` (comment lines) and ``case`` as YAML, proven to read back as ``case`` with evalx's own loader.

    Readable UTF-8 when that reads back exactly; else every non-ASCII
    character escaped. A text that still would not read back is a
    :class:`CaptureError` (a bug), never a file that means something else.
    """
    from evalx.common.documents import DocumentError, load_yaml

    want = _canonical(case)
    for allow_unicode in (True, False):
        text = header + yaml.dump(case, Dumper=_CaseDumper, sort_keys=False, allow_unicode=allow_unicode, width=100)
        try:
            back = load_yaml(text, name, interpolate=False).data
        except DocumentError:
            continue
        if _canonical(back) == want:
            return text
    raise CaptureError(f"{name}: the case cannot be written as YAML that reads back the same (a bug in evalx capture)")


def _comment(lines: list[str]) -> str:
    return "".join(f"# {comment_text(line)}\n" if line else "#\n" for line in lines)


def write_case(case: JSONObject, trace: Trace, out_dir: Path, *, force: bool = False, path: Path | None = None) -> Path:
    """Write ``case`` to ``path`` (by default ``OUT_DIR/<id>.yaml``; ``capture_all`` plans the names of a batch)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if path is None:
        path = out_dir / f"{case['id']}.yaml"
        if path.exists() and not force:
            raise CaptureError(f"{path} already exists (use --force to overwrite)")
    reason = (trace.failure_reason or "unknown").splitlines() or ["unknown"]
    if trace.golden:
        header = _comment(
            [
                f"Captured by `evalx capture` from {trace.source}",
                "A trace that went well: its final answer is `expected:` and its tool calls the golden trajectory",
                "(trajectory_match, in order), with a token budget of 1.5x what it used.",
                "",
                "TODO for a person: grade the answer against `expected:` (factuality, semantic_similar,",
                "llm_judge with a rubric...), loosen or tighten the trajectory, then commit it to the suite.",
            ]
        )
        write_text(path, dump_case(case, header, name=path.name))
        return path
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
    write_text(path, dump_case(case, header, name=path.name))
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
    reviewed: bool = False,
) -> Iterator[tuple[Path, list[str]]]:
    """Write one case file a trace; yield each file written with its warnings.

    Every trace is read and named first (:func:`plan_names`), so a name that
    is taken stops the batch before any file is written.
    """
    traces = [trace for path in paths for trace in read_traces(path, cases=cases, target=target, reviewed=reviewed)]
    planned = plan_names(traces, out_dir, force=force)
    for trace, path in zip(traces, planned):
        case, warnings = case_from_trace(trace, input_text=input_text)
        case["id"] = path.stem
        _keep_attachments(case, trace, out_dir, warnings)
        written = write_case(case, trace, out_dir, force=force, path=path)
        _check_loads(written)
        yield written, warnings
