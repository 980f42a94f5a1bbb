"""Exceptions raised by evalx.

The hierarchy::

    EvalxError
    ├── ConfigError          a config file is invalid (carries every issue found)
    ├── DatasetError         a dataset file or case is malformed
    ├── TargetError          a target failed to produce a trajectory
    │   ├── TargetTimeout        the cell or the stream went past its timeout
    │   └── TargetProtocolError  the remote answered something we cannot read
    ├── JudgeError           a judge call failed or its verdict was unreadable
    └── OutputError          a file evalx must write could not be (full disk, read-only folder...)

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


class OutputError(EvalxError):
    """A file evalx must write could not be written: the message names it and says why (exit 3)."""

    def __init__(self, path: str | os.PathLike[str], exc: OSError) -> None:
        self.path = os.fspath(path)
        shown = os.path.relpath(self.path) if os.path.isabs(self.path) and not os.path.relpath(self.path).startswith("..") else self.path
        super().__init__(f"cannot write {shown}: {exc.strerror or exc}")


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
