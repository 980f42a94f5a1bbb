"""Exceptions raised by evalx: one tree, every public exception under :class:`EvalxError`.

The hierarchy (``+X``: also a subclass of the builtin ``X``, so an ``except X`` written before keeps working)::

    Exception
    └── EvalxError               every error evalx raises on purpose; the CLI prints it as one line (exit 2)
        ├── ConfigError              a config is invalid: every issue found, each FILE:LINE key.path: message
        │   ├── DocumentError            a YAML/JSON document cannot be read (its problems keep key paths)  [documents.py]
        │   └── UnknownProvider          no provider definition has this name
        ├── DatasetError             a dataset file or case is malformed
        │   └── ContextFileError         a case's ``context_file:`` cannot be read
        ├── TargetError              a target failed: the cell is an ``error``, the run goes on
        │   ├── TargetTimeout            the cell or an idle stream went past its timeout
        │   ├── TargetProtocolError      the remote answered something evalx cannot read
        │   ├── StreamErrorEvent         a provider's stream sent an error event
        │   ├── EngineRateLimited        an engine reported ``LLM_RATE_LIMITED``
        │   ├── ProviderRateLimited      a provider said 429 / overloaded: retried outside ``retries:`` under adaptive pacing
        │   └── ConnectFailed            no connection to the target                      [targets/transport/http.py]
        ├── JudgeError               a judge call failed, or its verdict was unreadable
        ├── OutputError              a file evalx must write could not be (full disk, read-only folder...; exit 3)
        ├── UnreadableFile  +OSError  a file evalx reads is missing, not a regular file (a FIFO, a device, a directory),
        │                             past its kind's size limit, or not text: ``FILE: reason``     [common/reading.py]
        ├── TargetUnreachable        the pre-flight check could not connect to a remote target: no cell ran (exit 3)
        ├── HookFailed               a ``before_run`` hook failed: no cell ran (exit 3)
        ├── UserCodeError  +ImportError   user code a config names cannot be imported, or is not what was asked for
        ├── DefinitionError  +ValueError  a provider definition's template or expression failed at run time
        │                                 (the target reports it as a ConfigError or a TargetError)
        ├── MissingExtra  +RuntimeError   an assertion type's library is not installed (``evalx-runner[text]``)
        ├── RefusedRef  +ValueError       a user's JSON Schema ``$ref`` points outside the schema
        ├── UnsupportedSchema  +ValueError  a user's JSON Schema evalx cannot validate within bounds
        ├── UnknownTemplate  +ValueError  ``evalx init --template`` names no starter
        ├── RunNotFound              a RUN argument names no stored run
        ├── RequestError             run options that do not go together (``--rerun`` without ``--from``...)
        ├── ShardError               a bad ``--shard I/N``
        ├── ResumeError              a run cannot be resumed (unknown, or its cells changed)
        ├── RerunError               a rerun cannot be made (bad ``--rerun``, unknown parent, a changed plan)
        ├── NothingToRerun           the parent run has no cell of the kinds asked for (exit 0)
        ├── MergeError               run folders that cannot be merged
        ├── CaptureError             a trace cannot be read or turned into a case (``evalx capture``)
        ├── ForgeError               GitHub's or GitLab's API refused or failed a CI request (``evalx comment --post``,
        │                            ``evalx ci fetch-baseline``); ``status`` is the HTTP status, if any
        ├── EvalxFailed              an eval case did not pass: a failed pytest item of evalx's pytest plugin
        ├── TurnFailed               a conversation's turn failed: its cell's error names the turn  [execution/turns.py]
        ├── Raised                   a Python target's call ended in a BaseException that is not an Exception;
        │                            the target re-raises what it carries         [targets/threads.py]
        ├── OutOfTime                a check ran past its cell's deadline (worded ``timed out after Ns (...)``)
        │   └── RegexTimeout             a user's regex ran past its budget on the text it was given
        ├── NeedsThread              a check used its slice of the event loop: the evaluator runs it again in a thread
        ├── HeldTheLoop  +TimeoutError   the watchdog stopped code that held the event loop past its cell's deadline
        ├── TimeUp                   code ran past its :func:`evalx.common.timebox.timebox` (a template render)
        ├── TemplateRenderError  +ValueError  a template could not render: the cell's error names the field
        ├── TemplateRefused  +jinja2 SecurityError  a template would make a value past the render limits  [templates.py]
        └── TemplateFileError  +jinja2 TemplateError  an included template file is outside the folder, missing or not text  [templates.py]

Time has one owner (:mod:`evalx.common.deadline`): whichever layer notices that a
cell's deadline has come (its timer, the HTTP layer, a regex, a template,
the watchdog), the message reads ``timed out after Ns (what was running)``.

Every class is defined here except those with their module in brackets; one
that moved here is still importable from the module that defined it. Private
exceptions (a leading underscore) are signals caught in the module that
raises them and never reach a caller: they are not drawn.

Every message is meant to be shown to a person as one line: it names where
(file:line and key path) and never contains a secret.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class EvalxError(Exception):
    """Base class of every error evalx raises on purpose."""


def _message(exc: BaseException) -> str:
    """``str(exc)`` stripped, never raising: a user's exception whose ``__str__`` raises (even ``SystemExit``) has none."""
    try:
        return str(exc).strip()
    except BaseException:  # a target's, a check's or a hook's own class: its type says enough
        return ""


def described(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` (``Type`` alone when it has none), never raising: a user's exception whose
    ``__str__`` raises (even ``SystemExit``) is named by its type. How user code's exceptions enter evalx's messages."""
    text = _message(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def one_line(exc: BaseException) -> str:
    """``exc`` as the one line a person reads: ``Type: first line of its message`` (``Type`` alone when it has none)."""
    lines = _message(exc).splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class TargetUnreachable(EvalxError):
    """Before any cell ran, a remote target's host:port took no connection: one line a target (``lines``), exit 3."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("\n".join(lines))


class HookFailed(EvalxError):
    """A ``before_run`` hook failed (an exit status, a timeout, an exception): the run stopped before any cell (exit 3)."""


class OutputError(EvalxError):
    """A file evalx must write could not be written: the message names it and says why (exit 3)."""

    def __init__(self, path: str | os.PathLike[str], exc: OSError) -> None:
        self.path = os.fspath(path)
        shown = os.path.relpath(self.path) if os.path.isabs(self.path) and not os.path.relpath(self.path).startswith("..") else self.path
        super().__init__(f"cannot write {shown}: {exc.strerror or exc}")


class UnreadableFile(EvalxError, OSError):
    """A file evalx reads cannot be read as one: ``FILE: reason`` (``data.jsonl: not a regular file (a FIFO)``).

    Raised by :mod:`evalx.common.reading`, the one way evalx opens a file to
    read it. An ``OSError`` too (``errno`` set when the system gave one), so a
    caller that treats an unreadable file like a missing one keeps doing so;
    ``missing`` says the file (or the folder it is in) does not exist.
    """

    def __init__(self, file: str, reason: str, *, err: int = 0, missing: bool = False) -> None:
        super().__init__(err, reason)
        self.file, self.reason, self.missing = file, reason, missing

    def __str__(self) -> str:
        return f"{self.file}: {self.reason}"

    def __reduce__(self) -> tuple[object, ...]:  # pickled to a Ray driver or a forked reader's parent as it was raised
        return (_unreadable, (self.file, self.reason, self.errno or 0, self.missing))


def _unreadable(file: str, reason: str, err: int, missing: bool) -> UnreadableFile:
    return UnreadableFile(file, reason, err=err, missing=missing)


@contextmanager
def writing(path: str | os.PathLike[str], *, tmp: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Turn an :class:`OSError` while writing ``path`` into an :class:`OutputError` naming it (removing ``tmp``, a half-written copy)."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise OutputError(path, exc) from None


@dataclass(frozen=True)
class Issue:
    """One problem found in a config or dataset, with where it came from."""

    file: str
    line: int | None
    path: str
    message: str
    warning: bool = False

    @property
    def key_path(self) -> str:
        """The key path inside the file (``targets[2].url``); empty when the issue is about the whole file."""
        return self.path

    def __str__(self) -> str:
        if not self.message:  # a pre-formatted line (e.g. from a dataset error)
            return self.file
        where = f"{self.file}:{self.line}" if self.line else self.file
        key = f" {self.path}" if self.path else ""
        return f"{where}{key}: {self.message}"


class ConfigError(EvalxError):
    """The config is invalid; ``issues`` lists every problem found.

    For Python callers (the public API): ``errors`` lists every issue, each
    with ``file``, ``line``, ``key_path`` and ``message``; ``file``, ``line``
    and ``key_path`` are the first one's.
    """

    def __init__(self, issues: list[Issue] | Issue | str) -> None:
        if isinstance(issues, str):
            issues = [Issue(issues, None, "", "")]  # a pre-formatted line, printed as is
        elif isinstance(issues, Issue):
            issues = [issues]
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))
        first = _parts(issues[0]) if issues else None
        self.file: str = first.file if first else ""  # "" when the issue names no file
        self.line: int | None = first.line if first else None
        self.key_path: str = first.key_path if first else ""  # "" when it is about the whole file

    @property
    def errors(self) -> list[Issue]:
        """Every issue, a pre-formatted line (``FILE:LINE key.path: message``) read back into its parts."""
        return [_parts(i) for i in self.issues]


_FORMATTED = re.compile(
    r"^(?P<file><[^>]+>|[^\s:]+\.[A-Za-z0-9]+)(?::(?P<line>\d+))?(?: (?P<path>[A-Za-z_][^\s:]*))?: (?P<message>.+)$", re.S
)


def _parts(issue: Issue) -> Issue:
    """``issue`` with its file, line, key path and message apart (a pre-formatted one is split; a line it cannot split
    is kept whole as the message)."""
    if issue.message:
        return issue
    match = _FORMATTED.match(issue.file)
    if match is None:
        return Issue("", None, "", issue.file, issue.warning)
    line = match.group("line")
    return Issue(match.group("file"), int(line) if line else None, match.group("path") or "", match.group("message"), issue.warning)


class DatasetError(EvalxError):
    """A dataset could not be read; the message names file and line."""


class TargetError(EvalxError):
    """A target failed: the cell becomes an ``error``, the run goes on."""

    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class TargetTimeout(TargetError):
    """The whole cell, or an idle stream, went past its timeout."""


class TargetProtocolError(TargetError):
    """The target answered with data evalx cannot interpret."""


class JudgeError(EvalxError):
    """A judge call failed after retries, or its verdict could not be parsed."""

    def __init__(self, message: str, raw: str | None = None) -> None:
        super().__init__(message)
        self.raw = raw


class UnknownProvider(ConfigError):
    """No provider definition has this name; ``reason`` is the message without a location."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ContextFileError(DatasetError):
    """Why a ``context_file:`` cannot be read (one line, naming the file)."""


class StreamErrorEvent(TargetError):
    """The stream sent an error event: the server's message, retryable only before any answer."""


class EngineRateLimited(TargetError):
    """The engine reported an ``LLM_RATE_LIMITED`` error event."""


class ProviderRateLimited(TargetError):
    """A provider answered 429, 529 or "overloaded": under adaptive pacing it is waited out, never a retry nor a cell error.

    Raised by a provider target's request; its endpoint limiter
    (:mod:`evalx.targets.transport.pacing`) has already backed off when it is.
    """


class UserCodeError(EvalxError, ImportError):
    """User code named in a config cannot be imported or is not what was asked for; the message says why."""


class DefinitionError(EvalxError, ValueError):
    """A definition template failed at run time; ``where`` names FILE:LINE key.path."""


class MissingExtra(EvalxError, RuntimeError):
    """A type's library is not installed: the message is the one line that says which extra to install."""


class RefusedRef(EvalxError, ValueError):
    """A ``$ref`` that points outside the schema."""


class UnsupportedSchema(EvalxError, ValueError):
    """A schema evalx cannot validate within bounds."""


class UnknownTemplate(EvalxError, ValueError):
    """``evalx init --template NAME`` names no starter; the message lists the choices."""


class RunNotFound(EvalxError):
    """A RUN argument names no stored run."""


class ShardError(EvalxError):
    """A bad ``--shard`` value."""


class ResumeError(EvalxError):
    """A run cannot be resumed (unknown, or its cells changed)."""


class RerunError(EvalxError):
    """A rerun cannot be made (bad ``--rerun``, unknown parent, a plan that changed): one line, exit 2."""


class NothingToRerun(EvalxError):
    """The parent run has no cell of the kinds asked for: there is nothing to run (exit 0)."""


class MergeError(EvalxError):
    """Run folders that cannot be merged (not shards, shards of different plans, a shard twice or missing)."""


class CaptureError(EvalxError):
    """A trace could not be read or turned into a case."""


class ForgeError(EvalxError):
    """GitHub's or GitLab's API refused or failed a request of ``evalx comment --post`` or ``evalx ci fetch-baseline``."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class EvalxFailed(EvalxError):
    """An eval case did not pass (a pytest item of :mod:`evalx.pytest_plugin`): the message is its verdict and the assertion reasons."""


class OutOfTime(EvalxError):
    """A check ran past its scoring budget (its cell's :class:`~evalx.common.deadline.Deadline`).

    Not a ``TimeoutError``: the HTTP layer and the executor read those as the call's own timeout.
    """


class RegexTimeout(OutOfTime):
    """A regex ran past its budget on the text it was given."""


class NeedsThread(EvalxError):
    """The check used its slice of the event loop and has budget left: run it again in a thread."""


class HeldTheLoop(EvalxError, TimeoutError):
    """Raised by the watchdog inside code that held the event loop past its cell's deadline (it never awaits)."""


class TimeUp(EvalxError):
    """Raised inside code that ran past its :func:`evalx.common.timebox.timebox`."""


class TemplateRenderError(EvalxError, ValueError):
    """A template could not render (a syntax error, an undefined name, a refused or stopped render): the caller's error names the field."""


class RequestError(EvalxError):
    """Options that do not go together (``--rerun`` without ``--from``, ``--resume`` with ``--rerun``...): a usage error."""
