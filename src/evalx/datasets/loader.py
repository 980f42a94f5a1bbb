"""Load a config's ``datasets:`` entry into validated :class:`Case` objects.

A dataset is a file (``.jsonl``, ``.json``, ``.yaml``/``.yml``, ``.csv``), a
directory of such files (one JSON file a case is the Engine harness layout),
or cases written inline in the config. Every case remembers ``file:line``;
every problem is reported as ``FILE:LINE key.path: message`` and all the
problems of a dataset are raised together in one :class:`DatasetError`.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from evalx.assertions import get_assertion, registered
from evalx.assertions.deterministic import spec_problems
from evalx.assertions.hints import missing_type_hint
from evalx.assertions.plain import plainly_valid
from evalx.assertions.registry import generation
from evalx.common.documents import DocumentError, SchemaValidator, describe_schema_error, did_you_mean, load_json, load_yaml, parse_json
from evalx.common.json_types import JSON, JSONObject, as_object
from evalx.common.reading import DATASET, DATASET_LINE, lines, open_regular, read_text, size_text
from evalx.common.usercode import UserCodeError, resolve_callable
from evalx.datasets.case_schema import BASE_FIELDS, CASE_FIELDS, CASE_PROPERTIES, CASE_SCHEMA, TURN_PROPERTIES
from evalx.datasets.context import ContextFileError, ContextFiles, from_column
from evalx.datasets.fields import UNKNOWN_FIELD_HINT, Shape
from evalx.datasets.parts import AttachmentFiles
from evalx.datasets.shorthands import KeyPath, expand, unknown_field
from evalx.datasets.spec import DatasetSpec, dataset_spec
from evalx.datasets.split import Part, halves, in_child
from evalx.datasets.table import CaseTable
from evalx.errors import DatasetError, UnreadableFile
from evalx.models import Case

__all__ = ["CASE_FIELDS", "CASE_SCHEMA", "MAX_ERRORS", "case_schema_document", "load_dataset"]

MAX_ERRORS = 20
FILE_SUFFIXES = (".json", ".jsonl", ".yaml", ".yml", ".csv")

_STANDALONE_ASSERTION: JSONObject = {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}}
_JUDGE_OVERRIDE: JSONObject = {"type": "object"}  # settings merged over the config's judge:; the config schema refines it

# Validation of case fields; assertions are checked one by one against their own type's schema.
# assertion items are checked one by one against their own type (below), so the
# case validator skips them: following the $ref per item costs more than the rest
#: :data:`CASE_FIELDS` and :data:`BASE_FIELDS` as sets: a key is looked up in them for every field of every case
_CASE_FIELD_SET = frozenset(CASE_FIELDS)
_BASE_FIELD_SET = frozenset(BASE_FIELDS)
_CASE_OWN_FIELDS: dict[str, JSONObject] = {**CASE_PROPERTIES, "assert": {"type": "array"}}
_case_validator = SchemaValidator({**CASE_SCHEMA, "properties": dict(_CASE_OWN_FIELDS), "$defs": {"assertion": {}}})
_defaults_validator = SchemaValidator({"type": "object", "properties": dict(CASE_PROPERTIES), "$defs": {"assertion": {}}})


def case_schema_document() -> JSONObject:
    """CASE_SCHEMA as a standalone schema file (``schemas/case.schema.json``)."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "evalx case",
        **CASE_SCHEMA,
        "$defs": {"assertion": _STANDALONE_ASSERTION},
    }


# ---------------------------------------------------------------------------- errors


class _Errors:
    """Collects ``FILE:LINE key.path: message`` lines, keeping the first MAX_ERRORS."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.dropped = 0
        #: problems found, kept or dropped (read for every case: a count kept, not a sum made each time)
        self.count = 0

    def add(self, file: str, line: int | None, path: KeyPath, message: str) -> None:
        self.count += 1
        if len(self.lines) >= MAX_ERRORS:
            self.dropped += 1
            return
        self.lines.append(_error_line(file, line, path, message))

    def add_first(self, file: str, line: int | None, path: KeyPath, message: str) -> None:
        """A problem of the whole dataset, shown before the cases' (which it may explain)."""
        self.count += 1
        self.lines.insert(0, _error_line(file, line, path, message))
        if len(self.lines) > MAX_ERRORS:
            self.lines.pop()
            self.dropped += 1

    def raise_if_any(self) -> None:
        if self.lines:
            more = [f"... and {self.dropped} more"] if self.dropped else []
            raise DatasetError("\n".join(self.lines + more))


def _error_line(file: str, line: int | None, path: KeyPath, message: str) -> str:
    where = f"{file}:{line}" if line else file
    key = format_path(path)
    return f"{where} {key}: {message}" if key else f"{where}: {message}"


def format_path(path: KeyPath) -> str:
    """``("cases", 3, "assert", 1)`` → ``cases[3].assert[1]``"""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# ---------------------------------------------------------------------------- raw cases


@dataclass
class _Raw:
    """One case as read, before validation, with what is needed to say where it is."""

    data: Any
    file: str  # as shown to people: relative to the config's folder
    path: KeyPath  # key path shown in messages ("cases", 3)
    line: int | None
    native: KeyPath = ()  # where the case sits in its document, for ``positions``
    positions: Mapping[KeyPath, int] = field(default_factory=dict)

    def line_of(self, sub: KeyPath) -> int | None:
        """The line of ``sub`` in this case: the deepest key path whose line is known."""
        full = self.native + sub
        for n in range(len(full), len(self.native), -1):
            if full[:n] in self.positions:
                return self.positions[full[:n]]
        return self.line

    @property
    def source(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass
class _MappedRaw(_Raw):
    """A case of a dataset with ``fields:``: a field's line is its column's."""

    fields: Mapping[str, str] = field(default_factory=dict)  # case field -> column

    def line_of(self, sub: KeyPath) -> int | None:
        if sub and isinstance(sub[0], str) and sub[0] in self.fields:
            sub = (self.fields[sub[0]], *sub[1:])
        return super().line_of(sub)


def load_dataset(
    entry: DatasetSpec | Mapping[str, object],
    *,
    base_dir: Path,
    config_file: str = "evalconfig.yaml",
    line: int | None = None,
    positions: Mapping[KeyPath, int] | None = None,
    path_prefix: KeyPath = (),
    check_imports: bool = True,
    digest: Callable[[Case], bytes] | None = None,
    target_ids: Collection[str] | None = None,
) -> CaseTable:
    """The validated cases of one ``datasets:`` entry, in file order.

    ``positions`` maps key paths of the config (``("datasets", 1, "cases", 0)``)
    to lines, and ``path_prefix`` is this entry's key path (``("datasets", 1)``),
    so problems with inline cases or ``defaults:`` point into the config.
    With ``check_imports``, the callable of each ``python`` assertion must
    import (:mod:`evalx.common.usercode`, relative to ``base_dir``). With ``target_ids`` (the
    config's), a case's ``simulate.target`` must be one of them.
    ``entry`` is the typed record (a mapping the schema accepted is read into one).
    Raises :class:`DatasetError` listing every problem found.
    """
    spec = dataset_spec(entry)
    positions = positions or {}
    dataset_id = spec.id
    errors = _Errors()

    def config_line(sub: KeyPath) -> int | None:
        return positions.get(path_prefix + sub, line)

    raw_defaults = spec.defaults or {}
    defaults_raw = _Raw(
        raw_defaults, config_file, path_prefix + ("defaults",), config_line(("defaults",)), path_prefix + ("defaults",), positions
    )
    _check_defaults(defaults_raw, errors)
    if isinstance(raw_defaults, dict) and raw_defaults.get("simulate") is not None:  # a simulated user for every case
        _check_simulate(raw_defaults, defaults_raw, errors, target_ids)
    callables = _Callables(base_dir) if check_imports else None
    if callables is not None and isinstance(raw_defaults, dict):
        callables.check(raw_defaults.get("assert"), defaults_raw, errors)
    errors.raise_if_any()
    defaults = {k: v for k, v in raw_defaults.items() if k != "assert"}
    listed = raw_defaults.get("assert")
    default_asserts: list[JSONObject] = list(listed) if isinstance(listed, list) else []

    shape = Shape.of(spec.fields, spec.extra, CASE_FIELDS)
    fill = _Fill(
        dataset_id,
        None if spec.targets is None else list(spec.targets),
        defaults,
        default_asserts,
        callables,
        digest,
        None if target_ids is None else tuple(target_ids),
        ContextFiles(base_dir, config_file),
        AttachmentFiles(base_dir, config_file),
    )
    if shape is None and spec.path is not None and spec.cases is None:
        halves = _halves_of(base_dir / spec.path)
        if halves is not None:
            table = _read_in_halves(halves, spec.path, base_dir, config_file, config_line(("path",)), path_prefix, fill)
            if table is not None:
                return table
    raws: Iterable[_Raw]
    if spec.cases is not None:
        raws = [
            _Raw(data, config_file, path_prefix + ("cases", i), config_line(("cases", i)), path_prefix + ("cases", i), positions)
            for i, data in enumerate(spec.cases)
        ]
    elif spec.path is not None:
        raws = _read_path(spec.path, base_dir, errors, config_file, config_line(("path",)), path_prefix, shape)
    else:
        errors.add(config_file, line, path_prefix, "a dataset needs 'path' or 'cases'")
        raws = []
    if shape is not None:  # only then is each case reshaped: a plain dataset's cases are read as written
        raws = _reshaped(raws, shape, errors)

    cases, _ = _fill(raws, errors, fill)
    for name, message in shape.missing_columns() if shape is not None else ():
        errors.add_first(config_file, config_line(("fields", name)), path_prefix + ("fields", name), message)
    errors.raise_if_any()
    return cases


@dataclass
class _Fill:
    """What building a dataset's cases needs besides the cases: the dataset's id, ``targets:`` and ``defaults:``, the checks."""

    dataset_id: str
    targets: Any
    defaults: dict[str, object]
    default_asserts: list[JSONObject]
    callables: _Callables | None
    digest: Callable[[Case], bytes] | None
    #: the config's target ids (a ``simulate:`` user target must be one), None: not checked
    target_ids: tuple[str, ...] | None = None
    #: reads the cases' ``context_file:`` values
    contexts: ContextFiles = field(default_factory=lambda: ContextFiles(Path.cwd(), ""))
    #: reads the files the cases' input parts name
    attachments: AttachmentFiles = field(default_factory=lambda: AttachmentFiles(Path.cwd(), ""))


def _fill(raws: Iterable[_Raw], errors: _Errors, fill: _Fill) -> tuple[CaseTable, set[int]]:
    """The cases of ``raws`` built, checked and packed, in order; problems go to ``errors``. Also the hashes of their ids."""
    cases = CaseTable()
    dataset_id, default_targets, callables = fill.dataset_id, fill.targets, fill.callables
    # duplicate ids: the ids' hashes are kept (an int each, not a million strings and where each was seen);
    # a repeated hash is looked up exactly in `first_seen`, made from the table when the first one turns up
    hashes: set[int] = set()
    first_seen: dict[str, int | str] | None = None  # id -> where it was first used: a line of the file, or a source
    unbuilt: dict[str, int | str] = {}  # the ids of cases that had problems (not in the table), and where
    graded: dict[str, bool] = {}  # assertion type -> a model grades it
    for raw in raws:
        case = _build_case(raw, fill.defaults, fill.default_asserts, errors, fill.target_ids, fill.contexts, fill.attachments)
        if case is not None and callables is not None:
            callables.check(raw.data.get("assert"), raw, errors)
        case_id = case.id if case is not None else _case_id(raw.data)  # (a built case's id is the same: str(its id))
        if case_id is not None:
            if hash(case_id) in hashes:
                if first_seen is None:
                    first_seen = {**unbuilt, **_where_each_id_is(cases)}
                first = first_seen.get(case_id)
                if first is not None:
                    where = first if isinstance(first, str) else f"{raw.file}:{first}"
                    errors.add(raw.file, raw.line_of(("id",)), raw.path + ("id",), f"case id {case_id!r} is used twice (first at {where})")
                else:
                    first_seen[case_id] = _where(raw)
            else:
                hashes.add(hash(case_id))
                if first_seen is not None:
                    first_seen[case_id] = _where(raw)
                elif case is None:
                    unbuilt[case_id] = _where(raw)
        if case is not None:
            case.dataset = dataset_id
            if case.targets is None and default_targets is not None:
                case.targets = list(default_targets)
            cases.append(
                case,
                graded=_any_graded(case.asserts, graded)
                or (case.turns is not None and any(_any_graded(t.get("assert") or (), graded) for t in case.turns)),
                digest=fill.digest(case) if fill.digest is not None else None,
            )
    return cases, hashes


def _halves_of(path: Path) -> tuple[Part, Part] | None:
    return halves(path) if path.suffix.lower() == ".jsonl" and path.is_file() else None


def _read_in_halves(
    parts: tuple[Part, Part], spec_path: str, base_dir: Path, config_file: str, line: int | None, path_prefix: KeyPath, fill: _Fill
) -> CaseTable | None:
    """The dataset read by this process (first half) and a forked child (second half) at once; None: read it the usual way.

    None whenever either half has a problem or an id may be in both: the one-process
    read then words every problem exactly (:mod:`evalx.datasets.split`).
    """
    first, second = parts

    def read(part: Part) -> tuple[CaseTable, set[int], int]:
        errors = _Errors()
        table, hashes = _fill(_read_path(spec_path, base_dir, errors, config_file, line, path_prefix, part=part), errors, fill)
        table.forget_unpacked()  # decompressed blocks are a cache: not sent, not kept
        return table, hashes, errors.count

    child = in_child(lambda: read(second))
    if child is None:
        return None
    try:
        table, hashes, problems = read(first)
        other = child.result()
    finally:
        child.stop()
    if problems or other is None:
        return None
    rest, rest_hashes, rest_problems = other
    if rest_problems or not hashes.isdisjoint(rest_hashes):
        return None
    table.extend(rest)
    return table


def _reshaped(raws: Iterable[_Raw], shape: Shape, errors: _Errors) -> Iterator[_Raw]:
    """Each case with its columns read through the dataset's ``fields:`` and ``extra:``."""
    for raw in raws:
        data, problems = shape.apply(raw.data)
        for sub, message in problems:
            errors.add(raw.file, raw.line_of(sub), raw.path + sub, message)
        yield _MappedRaw(data, raw.file, raw.path, raw.line, raw.native, raw.positions, shape.fields)


def _where(raw: _Raw) -> int | str:
    """Where a case was read: its line in the file (an int), or its source when that is not ``file:line``."""
    return raw.line if raw.line and raw.source == f"{raw.file}:{raw.line}" else raw.source


def _where_each_id_is(cases: CaseTable) -> dict[str, int | str]:
    """Each case id of ``cases`` and where it was read (its source), for naming a duplicate's first use."""
    return {case.id: case.source for case in cases}


def _any_graded(specs: Iterable[JSONObject], known: dict[str, bool]) -> bool:
    """Whether a model grades one of the assertions ``specs`` (each type looked up once, kept in ``known``)."""
    for spec in specs:
        kind = spec.get("type")
        if not isinstance(kind, str):
            continue
        answer = known.get(kind)
        if answer is None:
            atype = get_assertion(kind)
            answer = known[kind] = atype is not None and atype.model_graded
        if answer:
            return True
    return False


class _Callables:
    """Checks that each ``python`` assertion's callable imports; each one is tried once per dataset."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.problems: dict[str, str | None] = {}

    def check(self, asserts: Any, raw: _Raw, errors: _Errors) -> None:
        for i, spec in enumerate(asserts if isinstance(asserts, list) else ()):
            if not isinstance(spec, dict) or spec.get("type") != "python" or not isinstance(spec.get("callable"), str):
                continue
            ref = spec["callable"]
            if ref not in self.problems:
                try:
                    resolve_callable(ref, self.base_dir)
                    self.problems[ref] = None
                except UserCodeError as exc:
                    self.problems[ref] = str(exc)
            problem = self.problems[ref]
            if problem is not None:
                sub = ("assert", i, "callable")
                errors.add(raw.file, raw.line_of(sub), raw.path + sub, problem)


def _case_id(data: Any) -> str | None:
    if isinstance(data, dict) and isinstance(data.get("id"), (str, int, float)) and not isinstance(data["id"], bool):
        return str(data["id"])
    return None


def _check_defaults(raw: _Raw, errors: _Errors) -> None:
    if not isinstance(raw.data, dict):
        errors.add(raw.file, raw.line, raw.path, f"must be a mapping, not {_kind(raw.data)}")
        return
    for key in raw.data:
        if key not in _CASE_FIELD_SET or key == "id":
            errors.add(raw.file, raw.line_of((key,)), raw.path + (key,), unknown_field(str(key), CASE_FIELDS))
    known = {k: v for k, v in raw.data.items() if k in _CASE_FIELD_SET}
    for err in _defaults_validator.iter_errors(known):
        sub = tuple(err.absolute_path)
        errors.add(raw.file, raw.line_of(sub), raw.path + sub, err.message)
    asserts = known.get("assert")
    for i, spec in enumerate(asserts if isinstance(asserts, list) else []):
        _check_assertion(spec, raw, ("assert", i), errors, generated=False)


# ---------------------------------------------------------------------------- one case


def _build_case(
    raw: _Raw,
    defaults: Mapping[str, object],
    default_asserts: list[JSONObject],
    errors: _Errors,
    target_ids: Collection[str] | None,
    contexts: ContextFiles,
    attachments: AttachmentFiles | None = None,
) -> Case | None:
    """Validate one raw case and build it, or report why not (and return None)."""
    before = errors.count
    data = raw.data
    if not isinstance(data, dict):
        errors.add(raw.file, raw.line, raw.path, f"a case must be a mapping, not {_kind(data)}")
        return None
    known: JSONObject = data  # read only, as the case's own fields
    if not data.keys() <= _CASE_FIELD_SET:  # an unknown key: named, and the known ones kept
        for key in data:
            if key not in _CASE_FIELD_SET:
                errors.add(raw.file, raw.line_of((key,)), raw.path + (key,), unknown_field(str(key), CASE_FIELDS) + UNKNOWN_FIELD_HINT)
        known = {k: v for k, v in data.items() if k in _CASE_FIELD_SET}
    for err in () if _plainly_valid(known) else _case_validator.iter_errors(known):
        sub = tuple(err.absolute_path)
        message = err.message
        if err.validator == "additionalProperties" and sub[:1] == ("turns",):
            continue  # a turn's unknown key: _check_turns names it, with a suggestion
        if not sub and err.validator == "anyOf" and defaults.get("simulate") is not None:
            continue  # the dataset's defaults give every case a simulated user, who writes the first message
        if not sub and err.validator == "anyOf":  # the input alternatives
            message = "'input' is a required property"
        if not sub and isinstance(raw, _MappedRaw) and message.startswith("'"):
            name = message.split("'")[1]
            if name in raw.fields:
                message += f" (fields: reads it from column {raw.fields[name]!r}, which this case does not have)"
        errors.add(raw.file, raw.line_of(sub), raw.path + sub, message)
    own = known.get("assert")
    own_asserts: list[Any] = own if isinstance(own, list) else []  # each checked below: a mapping with a known type
    for i, spec in enumerate(own_asserts):
        _check_assertion(spec, raw, ("assert", i), errors, generated=False)
    scripted = known.get("turns")
    if scripted is not None:
        _check_turns(scripted, known, raw, errors)
    if known.get("simulate") is not None:
        _check_simulate(known, raw, errors, target_ids)
    elif scripted is not None and defaults.get("simulate") is not None:
        message = "'turns' and the dataset's defaults.simulate cannot both apply (a conversation is scripted or simulated)"
        errors.add(raw.file, raw.line_of(("turns",)), raw.path + ("turns",), message)
    if errors.count > before:
        return None

    expansion = expand(_merge(defaults, known), base_fields=_BASE_FIELD_SET)
    for sub, message in expansion.errors:
        errors.add(raw.file, raw.line_of(sub), raw.path + sub, message)
    for spec, origin in expansion.generated:
        _check_assertion(spec, raw, origin, errors, generated=True)
    if errors.count > before:
        return None

    fields = expansion.fields
    turns: list[Any] | None = fields["turns"] if scripted is not None else None  # the case's own, as the schema accepted them
    if "messages" in known:  # a transcript: its turns were made by expand, each reply checked by expect_assert
        turns = fields["turns"]
        first = next((t["assert"][0] for t in turns if "assert" in t), None)
        if first is not None:
            _check_assertion(first, raw, ("expect_assert",), errors, generated=False)
            if errors.count > before:
                return None
    elif "expect_assert" in known:  # a dataset's defaults may set it for its transcripts; a case only beside messages
        message = "'expect_assert' checks the assistant messages of 'messages', which this case does not have"
        errors.add(raw.file, raw.line_of(("expect_assert",)), raw.path + ("expect_assert",), message)
        return None
    if turns is not None:
        fields["input"] = turns[0]["input"]  # what a report shows as the case's input: the first user message
    if "simulate" in fields:
        fields.setdefault("input", None)  # no input: the user target writes the first message
    if isinstance(fields.get("input"), list) and attachments is not None:  # parts: text, images, documents
        file = raw.file if "input" in known else attachments.config_file
        fields["input"], problems = attachments.resolve(file, fields["input"])
        for sub, message in problems:
            where: KeyPath = ("input", *sub) if "input" in known else ()
            errors.add(raw.file, raw.line_of(where), raw.path + where, message)
        if errors.count > before:
            return None
    if "context" in fields or "context_file" in fields:
        _context(fields, known, raw, errors, contexts)
        if errors.count > before:
            return None
    # no copies: a case's values were just parsed for it, and assertion specs are never mutated
    asserts = default_asserts + own_asserts
    if expansion.generated:  # (a new list: extended in place)
        asserts += [spec for spec, _ in expansion.generated]
    case = Case(id=str(known["id"]), asserts=asserts, source=raw.source, **fields)
    for i, spec in enumerate(asserts):  # what the assertion types know would fail on any output (their check= hooks)
        atype = get_assertion(spec["type"])
        problem = atype.check(spec, case) if atype is not None and atype.check is not None else None
        if problem is not None:
            sub = _assertion_origin(i, len(default_asserts), len(own_asserts), expansion.generated)
            errors.add(raw.file, raw.line_of(sub), raw.path + sub, f"{spec['type']}: {problem}")
    for t, turn in enumerate(turns or ()):
        for i, spec in enumerate(turn.get("assert") or ()):
            atype = get_assertion(spec["type"])
            problem = atype.check(spec, case) if atype is not None and atype.check is not None else None
            if problem is not None:
                sub = ("turns", t, "assert", i) if not expansion.turn_origins else expansion.turn_origins[t] or ()
                errors.add(raw.file, raw.line_of(sub), raw.path + sub, f"{spec['type']}: {problem}")
    return None if errors.count > before else case


def _context(fields: dict[str, Any], known: JSONObject, raw: _Raw, errors: _Errors, contexts: ContextFiles) -> None:
    """``fields["context"]`` from ``context``, ``context_file`` (read by ``contexts``) or a ``fields:`` column; see :mod:`evalx.datasets.context`."""
    name = fields.pop("context_file", None)
    if "context" in known and "context_file" in known:
        message = "'context' and 'context_file' cannot both be given"
        errors.add(raw.file, raw.line_of(("context_file",)), raw.path + ("context_file",), message)
        return
    if name is not None and "context" not in known:  # the case's own context wins over a context_file in defaults:
        try:
            file = raw.file if "context_file" in known else contexts.config_file  # defaults: are written in the config
            fields["context"] = contexts.read(file, str(name))
        except ContextFileError as exc:
            sub: KeyPath = ("context_file",)
            errors.add(raw.file, raw.line_of(sub), raw.path + sub, str(exc))
        return
    if isinstance(raw, _MappedRaw) and "context" in raw.fields:
        value = from_column(fields["context"])
        if not (isinstance(value, str) or _is_strings(value)):
            message = f"column {raw.fields['context']!r} must hold a string or a JSON list of strings (passages), not {_kind(value)}"
            errors.add(raw.file, raw.line_of(("context",)), raw.path + ("context",), message)
        fields["context"] = value


def _check_turns(turns: JSON, known: JSONObject, raw: _Raw, errors: _Errors) -> None:
    """A conversation's own rules (its shape is the schema's): each turn's assertions, and no ``input`` beside ``turns``."""
    for name in ("input", "user_message", "question"):
        if name in known:
            message = f"{name!r} and 'turns' cannot both be given (the first turn's input is the case's input)"
            errors.add(raw.file, raw.line_of((name,)), raw.path + (name,), message)
    allowed = tuple(TURN_PROPERTIES)
    for t, turn in enumerate(turns if isinstance(turns, list) else ()):
        for key in turn if isinstance(turn, dict) else ():
            if key not in allowed:
                errors.add(raw.file, raw.line_of(("turns", t, key)), raw.path + ("turns", t, key), unknown_field(str(key), allowed))
        asserts = turn.get("assert") if isinstance(turn, dict) else None
        for i, spec in enumerate(asserts if isinstance(asserts, list) else ()):
            _check_assertion(spec, raw, ("turns", t, "assert", i), errors, generated=False)


def _check_simulate(known: Mapping[str, object], raw: _Raw, errors: _Errors, target_ids: Collection[str] | None) -> None:
    """A simulation's own rules: not beside ``turns``, a user target that exists, a ``stop`` regex that compiles."""
    if "turns" in known:
        errors.add(
            raw.file,
            raw.line_of(("simulate",)),
            raw.path + ("simulate",),
            "'turns' and 'simulate' cannot both be given (a conversation is scripted or simulated)",
        )
    sim = known["simulate"]
    if not isinstance(sim, dict):
        return
    ref = sim.get("target")
    if target_ids is not None and isinstance(ref, str) and ref not in target_ids:
        sub: KeyPath = ("simulate", "target")
        errors.add(
            raw.file,
            raw.line_of(sub),
            raw.path + sub,
            f"unknown target {ref!r} for the simulated user{did_you_mean(ref, list(target_ids))}",
        )
    stop = sim.get("stop")
    if isinstance(stop, dict) and isinstance(stop.get("regex"), str):
        try:
            re.compile(stop["regex"])
        except re.error as exc:
            sub = ("simulate", "stop", "regex")
            errors.add(raw.file, raw.line_of(sub), raw.path + sub, f"not a valid regular expression: {exc}")


def _assertion_origin(i: int, n_defaults: int, n_own: int, generated: list[tuple[JSONObject, KeyPath]]) -> KeyPath:
    """Where the case's ``i``-th assertion was written: the case itself for a ``defaults:`` one, its ``assert:`` item, or its shorthand."""
    if i < n_defaults:
        return ()
    if i < n_defaults + n_own:
        return ("assert", i - n_defaults)
    return generated[i - n_defaults - n_own][1]


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


#: base fields whose schema is checked by hand; anything else goes to jsonschema
_PLAIN_CHECKS: dict[str, Callable[[Any], bool]] = {
    "id": lambda v: (isinstance(v, str) and v != "") or _is_number(v),
    "input": lambda v: (
        isinstance(v, (str, dict)) or (isinstance(v, list) and all(isinstance(p, dict) for p in v))
    ),  # parts: checked by parts.py
    "expected": lambda v: True,
    "category": _is_str,
    "difficulty": _is_str,
    "description": _is_str,
    "notes": _is_str,
    "system": _is_str,
    "tags": _is_strings,
    "targets": _is_strings,
    "vars": lambda v: isinstance(v, dict),
    "metadata": lambda v: isinstance(v, dict),
    "assert": lambda v: isinstance(v, list),
    "threshold": lambda v: _is_number(v) and 0 <= v <= 1,
    "repeat": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
    "context": lambda v: isinstance(v, str) or _is_strings(v),
}


def _plainly_valid(known: JSONObject) -> bool:
    """True when the case surely passes ``_case_validator`` (which then need not run).

    The schema walk was most of the cost of loading a large dataset. This
    answers only for the common shape — base fields with plainly right
    types, an ``id`` and an ``input`` — and says False for anything else
    (shorthands, a doubtful type), which jsonschema then checks and words.
    Worth keeping (issue 29, ``python bench/fast_paths.py --stages``):
    jsonschema costs 32 µs a case more, 6 % of a 5,000-cell instant provider
    run's CPU and 18 % of a 20,000-cell instant Python run's.
    """
    if "id" not in known or "input" not in known:
        return False
    for key, value in known.items():
        check = _PLAIN_CHECKS.get(key)
        if check is None or not check(value):
            return False
    return True


def _merge(defaults: Mapping[str, object], case: JSONObject) -> dict[str, object]:
    """The case (its fields validated) over the dataset's ``defaults:``: mappings merge, tags add up, the rest the case wins
    (``assert`` is the caller's: the case's is left out)."""
    merged = dict(defaults)  # shallow: nothing downstream mutates a case's values
    merged.update(case)  # a key of the defaults keeps its place, a new one follows in the case's order
    if "assert" in case:
        if "assert" in defaults:
            merged["assert"] = defaults["assert"]
        else:
            del merged["assert"]
    if defaults:  # what adds up rather than replaces, where both give it
        for key in _ADDED_UP:
            if key in case and key in defaults:
                under, value = defaults[key], case[key]
                if key == "tags":
                    if isinstance(under, list) and isinstance(value, list):
                        merged[key] = under + [t for t in value if t not in under]
                elif isinstance(under, dict) and isinstance(value, dict):
                    merged[key] = {**under, **value}
    return merged


#: the fields whose case value is added to the defaults' (mappings merged, tags appended)
_ADDED_UP = ("vars", "metadata", "tags")


def _check_assertion(spec: Any, raw: _Raw, sub: KeyPath, errors: _Errors, *, generated: bool) -> None:
    """Dispatch on ``type:`` and validate against that type's own schema.

    Problems in an assertion made from a shorthand are reported at the
    shorthand's key (``cases[2].required_tools``), which is what the person wrote.
    """

    def report(inner: KeyPath, message: str) -> None:
        where = sub if generated else sub + inner
        errors.add(raw.file, raw.line_of(where), raw.path + where, message)

    for inner, message in spec_problems(spec):  # what a schema cannot see: a json_schema's $ref outside it
        report(inner, message)
    # the common case, distinct specs included: a plain-Python check that the spec surely fits its type
    if isinstance(spec, dict) and isinstance(spec.get("type"), str):
        atype = get_assertion(spec["type"])
        if atype is not None and plainly_valid(atype, spec):
            return
    # golden sets repeat the same few assertions thousands of times: check each once
    global _valid_generation
    if _valid_generation != generation():  # a plugin registered or replaced a type since
        _valid_specs.clear()
        _valid_generation = generation()
    fingerprint = _fingerprint(spec)
    if fingerprint is not None and fingerprint in _valid_specs:
        return
    before = errors.count

    if not isinstance(spec, dict):
        report((), f"an assertion must be a mapping, not {_kind(spec)}")
        return
    kind = spec.get("type")
    if kind is None:
        report((), "'type' is a required property" + missing_type_hint(spec))
        return
    if not isinstance(kind, str):
        report(("type",), f"{kind!r} is not of type 'string'")
        return
    atype = get_assertion(kind)
    if atype is None:
        report(("type",), f"unknown assertion type {kind!r}{did_you_mean(kind, list(registered()))}")
        return
    schema = atype.schema()
    allowed = list(as_object(schema.get("properties")))
    for key in spec:
        if key not in allowed:
            report((key,), unknown_field(str(key), allowed))
    for err in _assertion_validator(kind, schema).iter_errors(spec):
        if err.validator == "additionalProperties":
            continue  # reported above, with a suggestion
        if err.validator == "type":  # says "is not a finite number" for .nan/.inf
            report(*describe_schema_error(err))
        else:
            report(tuple(err.absolute_path), err.message)
    if fingerprint is not None and errors.count == before and len(_valid_specs) < 10_000:
        _valid_specs.add(fingerprint)


_validators: dict[str, tuple[JSONObject, Any]] = {}


_valid_specs: set[str] = set()
_valid_generation = -1


def _fingerprint(spec: Any) -> str | None:
    try:
        return json.dumps(spec, sort_keys=True)
    except (TypeError, ValueError):
        return None


def _assertion_validator(kind: str, schema: JSONObject) -> Any:
    cached = _validators.get(kind)
    if cached is None or cached[0] is not schema:
        cached = (schema, SchemaValidator({**schema, "$defs": {"judge_override": _JUDGE_OVERRIDE}}))
        _validators[kind] = cached
    return cached[1]


def _kind(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", type(None): "null", bool: "a boolean"}
    return names.get(type(value), type(value).__name__)


# ---------------------------------------------------------------------------- files


def _read_path(
    spec_path: str,
    base_dir: Path,
    errors: _Errors,
    config_file: str,
    line: int | None,
    path_prefix: KeyPath,
    shape: Shape | None = None,
    part: Part | None = None,
) -> Iterable[_Raw]:
    """The raw cases of a dataset's ``path:`` (``part``: only those lines of a JSONL file)."""
    where = path_prefix + ("path",) if path_prefix else ()
    full = base_dir / spec_path
    shown = PurePosixPath(Path(spec_path).as_posix())
    if full.is_dir():
        # every case file that is not a folder: one that is not a regular file (a FIFO, a device) is named, never read
        files = sorted(p for p in full.iterdir() if p.suffix.lower() in FILE_SUFFIXES and not p.is_dir())
        if not files:
            errors.add(config_file, line, where, f"no case files ({', '.join(FILE_SUFFIXES)}) in directory {shown}")
        return [raw for f in files for raw in _read_file(f, str(shown / f.name), errors, shape)]
    if not full.exists() and not full.is_symlink():
        errors.add(config_file, line, where, f"missing dataset file {shown}")
        return []
    if full.suffix.lower() not in FILE_SUFFIXES:
        errors.add(
            config_file,
            line,
            where,
            f"unsupported dataset format {full.suffix!r} in {shown} (use .jsonl, .json, .yaml, .yml, .csv or a directory)",
        )
        return []
    return _read_file(full, str(shown), errors, shape, part)


def _read_file(path: Path, shown: str, errors: _Errors, shape: Shape | None = None, part: Part | None = None) -> Iterable[_Raw]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        # streamed from the file, a line at a time: a million cases' text, or their lines, held at once
        # were hundreds of MB of a run's peak; load_dataset reads them once and raises the parse errors after the loop
        return _read_jsonl(path, shown, errors, part)
    try:  # a regular file only (a FIFO or a device is refused, never read), at most DATASET's size
        text = read_text(path, DATASET, shown=shown, encoding="utf-8-sig")
    except UnreadableFile as exc:
        errors.add(shown, None, (), exc.reason)
        return []
    if suffix == ".csv":
        return list(_read_csv(text, shown, errors, shape))
    try:  # the one loader of documents with positions (evalx.common.documents): a key written twice is an error
        loaded = load_json(text, shown) if suffix == ".json" else load_yaml(text, shown, interpolate=False)
    except DocumentError as exc:
        _add_problems(errors, exc)
        return []
    return _split_cases(loaded.data, loaded.lines, shown, errors)


def _add_problems(errors: _Errors, exc: DocumentError, case_path: KeyPath = ()) -> None:
    """A document's problems as dataset errors: under ``case_path`` (a JSONL line's case); a top-level list is ``cases``."""
    for problem in exc.problems:
        path = problem.path
        if not case_path and path and isinstance(path[0], int):
            path = ("cases", *path)
        errors.add(exc.file, problem.line, (*case_path, *path) if path else (), problem.message)


def _split_cases(data: Any, positions: Mapping[KeyPath, int], shown: str, errors: _Errors) -> list[_Raw]:
    """A document holds a list of cases, ``{cases: [...]}``, or one case."""
    if data is None:
        return []
    if isinstance(data, list):
        return [_Raw(c, shown, ("cases", i), positions.get((i,)), (i,), positions) for i, c in enumerate(data)]
    if not isinstance(data, dict):
        errors.add(shown, 1, (), f"expected a list of cases, one case or {{cases: [...]}}, not {_kind(data)}")
        return []
    if "cases" not in data:  # one case a file (the Engine harness layout)
        return [_Raw(data, shown, (), positions.get((), 1), (), positions)]
    for key in data:
        if key != "cases":
            errors.add(shown, positions.get((key,)), (key,), f"unknown top-level key {key!r} (only 'cases' may sit beside the cases)")
    cases = data["cases"]
    if not isinstance(cases, list):
        errors.add(shown, positions.get(("cases",)), ("cases",), f"must be a list of cases, not {_kind(cases)}")
        return []
    return [_Raw(c, shown, ("cases", i), positions.get(("cases", i)), ("cases", i), positions) for i, c in enumerate(cases)]


def _read_jsonl(path: Path, shown: str, errors: _Errors, part: Part | None = None) -> Iterator[_Raw]:
    index = part.first_index if part is not None else 0
    first_line = part.first_line if part is not None else 1
    try:
        with open_regular(path, shown=shown) as f:  # a FIFO or a device is refused, never read
            if part is not None:
                f.seek(part.start)
            read: Iterable[bytes | None] = lines(f, DATASET_LINE, stop=True)  # a line at a time, each at most DATASET_LINE's size
            if part is not None and part.end is not None:
                read = _up_to(read, part.end - part.start)
            for lineno, raw in enumerate(read, first_line):
                if raw is None:
                    errors.add(shown, lineno, (), f"a line longer than the {size_text(DATASET_LINE.limit)} limit for {DATASET_LINE.name}")
                    return
                try:
                    line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    errors.add(shown, lineno, (), f"cannot read: {exc}")
                    return
                stripped = line.strip()
                if not stripped or stripped.startswith(("//", "#")):
                    continue
                try:
                    data = parse_json(line.rstrip("\n"), shown, first_line=lineno)  # the whole line: error columns count from its start
                except DocumentError as exc:
                    _add_problems(errors, exc, ("cases", index))
                else:
                    yield _Raw(data, shown, ("cases", index), lineno)
                index += 1
    except UnreadableFile as exc:
        errors.add(shown, None, (), exc.reason)
    except OSError as exc:
        errors.add(shown, None, (), f"cannot read: {exc.strerror or exc}")


def _up_to(read: Iterable[bytes | None], size: int) -> Iterator[bytes | None]:
    """The lines of ``read`` within its first ``size`` bytes (a line past its limit ends them: it is an error)."""
    for line in read:
        if size <= 0:
            return
        if line is None:
            yield line
            return
        size -= len(line)
        yield line


# CSV cells are text: these columns hold JSON when they look like it, lists when split, numbers when parsed.
_JSON_CELLS = frozenset({"assert", "vars", "metadata"})  # must be JSON
_MAYBE_JSON_CELLS = frozenset({"input", "expected", "expected_answer", "expected_output", "expectedOutput", "mockElements", "context"})
_LIST_CELLS = {
    "tags": ",;",
    "targets": ",;",
    "required_tools": ",;",
    "forbidden_tools": ",;",
    "expectedKeywords": ",;",
    "expected_keywords": ",;",
    "expectedCharacteristics": ";",
    "expected_characteristics": ";",  # sentences may hold commas
}
_NUMBER_CELLS: dict[str, type] = {"threshold": float, "repeat": int, "max_tokens": int, "max_iterations": int}


def _read_csv(text: str, shown: str, errors: _Errors, shape: Shape | None = None) -> Iterator[_Raw]:
    """The rows as cases keyed by column; with a ``shape``, a cell is parsed as the field its column is read as."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        return
    # each column's use: parsed as the case field named (None: dropped, "": kept as text, a var or metadata)
    plan: list[str | None] = []
    for name in header:
        if shape is None:
            parse_as = name if name in CASE_FIELDS else None
            problem = None if parse_as else unknown_field(name, CASE_FIELDS) + UNKNOWN_FIELD_HINT
        else:
            role = shape.role(name)
            parse_as = shape.field_of(name) if role == "field" else "" if role == "extra" else None
            problem = shape.problem(name) if role is None else None
        if problem is not None:
            errors.add(shown, 1, (name,), problem)
        plan.append(parse_as)
    if shape is not None:
        shape.seen.update(header)
    index, last_line = 0, reader.line_num
    for row in reader:
        start, last_line = last_line + 1, reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) > len(header):
            errors.add(shown, start, ("cases", index), f"row has {len(row)} cells but the header has {len(header)}")
        case: JSONObject = {}
        for name, parse_as, cell in zip(header, plan, row):
            if not parse_as:
                if parse_as == "":
                    case[name] = cell
                continue
            if not cell.strip():
                continue
            try:
                case[name] = _csv_cell(parse_as, cell)
            except json.JSONDecodeError as exc:
                errors.add(shown, start, ("cases", index, name), f"invalid JSON: {exc.msg} (column {exc.colno})")
        yield _Raw(case, shown, ("cases", index), start)
        index += 1


def _csv_cell(name: str, cell: str) -> Any:
    text = cell.strip()
    looks_json = text.startswith(("[", "{"))
    if name in _JSON_CELLS or (looks_json and name in _LIST_CELLS):
        return json.loads(text)
    if looks_json and name in _MAYBE_JSON_CELLS:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return cell  # "[INST] ..." is text, not broken JSON
    if name in _LIST_CELLS:
        seps = _LIST_CELLS[name]
        sep = ";" if ";" in text or seps == ";" else ","
        return [part.strip() for part in text.split(sep) if part.strip()]
    if name in _NUMBER_CELLS:
        try:
            return _NUMBER_CELLS[name](text)
        except ValueError:
            return cell  # the schema check says what is wrong
    return cell
