"""Untrusted text made safe to show a human: the characters that hide, reorder or control, and how each output shows them.

One list of characters, used by every output evalx writes for people (the
terminal, ``summary.txt``, JUnit, the HTML report, Markdown, stderr):

- control characters: C0 (``\\n`` and ``\\t`` stay where text may span lines),
  DEL and C1 (U+0085, the "next line", among them);
- lone surrogates, which cannot be UTF-8;
- invisible characters: zero-width spaces and joiners, word joiners,
  the BOM, the Mongolian vowel separator, the soft hyphen, the other
  Unicode format (``Cf``) characters such as the tag characters
  U+E0020-E007F, Hangul fillers, the combining grapheme joiner and
  variation selectors;
- bidirectional controls (embeddings, overrides, isolates, marks), which
  reorder what follows them on screen;
- the line and paragraph separators U+2028 and U+2029.

Ids (case, target, dataset, category) are shown with all of them escaped,
and every blank other than the space too, so ``ref\\u200bund`` never looks
like ``refund``. Longer text (outputs, reasons, error bodies) keeps what
scripts and emoji need: the zero-width (non-)joiner U+200C/U+200D,
variation selectors and other spaces. The escape form is Python's
(``\\x1b``, ``\\u200b``, ``\\U000e0041``); JUnit and HTML use their own
forms of the same list.
"""

from __future__ import annotations

import codecs
import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = [
    "BODY_CHARS",
    "IDENT_CHARS",
    "TerminalSafeStream",
    "cell_label",
    "describe_hidden",
    "escape",
    "has_hidden",
    "markdown_code",
    "markdown_text",
    "one_line",
    "show_id",
    "terminal_safe_stderr",
    "terminal_text",
    "write_controls",
]

# the characters that join letters in some scripts and emoji, and pick emoji or text presentation:
# invisible, but long text needs them as they are
_JOINERS = "\u200c\u200d\ufe00-\ufe0f\U000e0100-\U000e01ef"
# Unicode format (Cf) characters that show a visible sign (Arabic number signs and the like)
_VISIBLE_FORMAT = "\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2\U000110bd\U000110cd"
# blanks other than the space: they look like one
_SPACES = "\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"
# C1 and DEL, lone surrogates, invisible and bidi characters, separators: hidden or harmful anywhere
_ALWAYS = (
    "\x7f-\x9f"
    "\ud800-\udfff"
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e"
    "\u200b\u200e\u200f"  # zero-width space, left-to-right and right-to-left marks
    "\u2028-\u202e"  # line and paragraph separators, bidi embeddings and overrides
    "\u2060-\u2064\u2066-\u206f"  # word joiner, invisible operators, bidi isolates, deprecated format characters
    "\u2800\u3164\ufeff\uffa0\ufff9-\ufffb"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
#: every character an id shows escaped (a character class body for ``re``)
IDENT_CHARS = "\x00-\x1f" + _ALWAYS + _JOINERS + _VISIBLE_FORMAT + _SPACES
#: the characters longer text shows escaped, less ``\n``, ``\t`` and ``\r``, which each output handles itself
BODY_CHARS = "\x00-\x08\x0b\x0c\x0e-\x1f" + _ALWAYS

_IDENT = re.compile(f"[{IDENT_CHARS}]|\\\\(?=[xuU\\\\])")
_BODY = re.compile(f"[{BODY_CHARS}\r]")
_LINE = re.compile(f"[{BODY_CHARS}\n\r\t]")
_HIDDEN = re.compile(f"[{IDENT_CHARS}]")
# what may reach a terminal on stderr: SGR colour codes evalx itself emits (reset, bold, dim,
# red, green, yellow), never one that hides text, moves the cursor, sets a title or a link
_TERMINAL = re.compile(f"\x1b\\[((?:0|1|2|22|31|32|33|39)?(?:;(?:0|1|2|22|31|32|33|39))*)m|[{BODY_CHARS}\r]")


def escape(char: str) -> str:
    """One character in Python's escape form: ``\\x1b``, ``\\u200b``, ``\\U000e0041``."""
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    return "\\\\" if char == "\\" else escape(char)


def show_id(value: Any) -> str:
    """An id as it must be shown: every hidden, control or non-space blank character escaped.

    A backslash that could start an escape (before ``x``, ``u``, ``U`` or
    another backslash) is doubled, so an id typed as ``ref\\u200bund`` and
    one that holds a real zero-width space look different too.
    """
    text = "" if value is None else str(value)
    if text.isascii() and text.isprintable() and "\\" not in text:
        return _no_command(text)
    return _no_command(_IDENT.sub(_escaped, text))


# what Markdown (GitHub's, GitLab's) reads as markup in a line of text: each is shown as itself
# (a ``]`` only where it would close a link or an image's text: ``[a](url)``, ``[a][ref]``; a ``matrix[x=1]`` id reads as it is)
# (a backslash only where it could escape what follows: before ASCII punctuation or at the end; ``ref\\u200bund`` stays so)
_MARKDOWN = re.compile(r"\\(?=[!-/:-@\[-`{-~]|$)|[`*~<>&|]|\](?=[(\[])|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_MARKDOWN_AS = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "`": "'"}
# what the forges link and notify from plain text: @user and @org/team mentions, #123 issues, !123 merge requests
_REFERENCE = re.compile(r"(?<![A-Za-z0-9])([@#!])(?=[A-Za-z0-9])")


def _clipped(value: Any, width: int | None) -> str:
    line = one_line(value)
    return line if width is None or len(line) <= width else line[: width - 1] + "…"


def markdown_text(value: Any, width: int | None = None) -> str:
    """Untrusted text as one line of Markdown text (a table cell, a heading, a quote) that shows it and nothing else.

    One line (:func:`one_line`, clipped to ``width``); HTML (``<``, ``>``,
    ``&``) as entities; link, image, emphasis and code markup (the ``]`` of
    ``[text](url)``, ``*``, ``_``, ``~``, a backtick as ``'``), ``|`` and ``\\``
    escaped with a backslash; a mention (``@user``), an issue (``#12``) or a merge request
    (``!12``) broken by a zero-width space, so nobody is notified and no
    other thread is referenced. A bare URL stays a visible link.
    """
    text = _MARKDOWN.sub(lambda m: _MARKDOWN_AS.get(m.group(), "\\" + m.group()), _clipped(value, width))
    return _REFERENCE.sub(lambda m: m.group(1) + "&#8203;", text)


def markdown_code(value: Any, width: int | None = None, *, table: bool = False) -> str:
    """Untrusted text for a Markdown code span (between backticks): one line, no backtick to close it (``'``), and in a table ``|`` escaped."""
    text = _clipped(value, width).replace("`", "'")
    return text.replace("|", "\\|") if table else text


def cell_label(dataset: Any, case_id: Any, repeat: Any = 0) -> str:
    """A case (or one repeat of it) as every report names it: ``dataset/case`` (``dataset/case #r2``), ids shown safely.

    The one label: the dataset and the case id are what identify a case (as in
    JUnit's ``classname`` and ``name``); a category is a property, never a name.
    """
    label = f"{show_id(dataset)}/{show_id(case_id)}"
    return f"{label} #r{repeat}" if isinstance(repeat, int) and not isinstance(repeat, bool) and repeat > 0 else label


def has_hidden(value: Any) -> bool:
    """Whether ``value`` holds a character :func:`show_id` escapes (a control, an invisible or a bidi character…)."""
    text = "" if value is None else str(value)
    return not (text.isascii() and text.isprintable()) and _HIDDEN.search(text) is not None


def one_line(value: Any) -> str:
    """Untrusted text made safe for one terminal line: no escapes, no newlines, nothing hidden."""
    text = "" if value is None else str(value)
    if not (text.isascii() and text.isprintable()):
        text = _LINE.sub(lambda m: " " if m.group() in "\n\r\t" else escape(m.group()), text)
    return _no_command(" ".join(text.split()))


def _no_command(text: str) -> str:
    """``text`` that cannot pass for a CI workflow command where it opens a line (``::error::``, ``::add-mask::``, ``::stop-commands::``).

    GitHub's runner reads any line of a step's output that starts, after
    blanks, with ``::`` as a command: an id or a reason shown first on a line
    (``evalx runs``, a table) would be one. Its first colon is shown escaped.
    """
    stripped = text.lstrip(" ")
    if not stripped.startswith("::"):
        return text
    at = len(text) - len(stripped)
    return text[:at] + "\\x3a" + text[at + 1 :]


def terminal_text(text: str) -> str:
    """Text for a terminal over several lines: ``\\n`` and ``\\t`` stay, evalx's own colour codes stay, the rest is escaped."""
    if text.isascii() and text.isprintable():
        return text

    def visible(match: re.Match[str]) -> str:
        return match.group() if match.group(1) is not None else escape(match.group()[0]) + match.group()[1:]

    return _TERMINAL.sub(visible, text)


def write_controls(stream: Any, text: str) -> None:
    """Write evalx's own terminal controls (a progress line's ``\\r``, erase-line) to ``stream`` as they are."""
    raw = getattr(stream, "write_controls", None)
    (raw or stream.write)(text)


class _SafeBuffer:
    """``sys.stderr.buffer`` behind :class:`TerminalSafeStream`: bytes decoded (UTF-8) and made safe the same way."""

    def __init__(self, owner: TerminalSafeStream) -> None:
        self._owner = owner
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, data: bytes) -> int:
        self._owner.write(self._decoder.decode(bytes(data)))
        return len(data)

    def flush(self) -> None:
        self._owner.flush()

    def writable(self) -> bool:
        return True


class TerminalSafeStream:
    """A text stream that lets nothing a terminal would act on through, except evalx's own colour codes.

    Installed as ``sys.stderr`` by the command line, so every warning,
    progress line, cell error, judge warning and watchdog message (whoever
    writes it, whatever it quotes) is shown with escapes instead of
    moving the cursor, setting the title, opening a link or hiding text.
    Only :meth:`write_controls` writes raw, for the progress line.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.buffer = _SafeBuffer(self)

    def write(self, text: str) -> int:
        self.stream.write(terminal_text(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def write_controls(self, text: str) -> None:
        self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return bool(self.stream.isatty())

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:  # encoding, errors, fileno, closed...: the real stream's
        return getattr(self.stream, name)


#: the safe stream made over each stream, by id (each holds its stream: the ids stay theirs), kept for the life of the
#: process: a thread may still be inside ``print`` with it once it is put back, and CPython 3.11's ``print`` holds
#: ``sys.stderr`` without a reference of its own (gh-130163; :mod:`evalx.targets.printed` keeps its routers alike)
_SAFE: dict[int, TerminalSafeStream] = {}


@contextlib.contextmanager
def terminal_safe_stderr() -> Iterator[TerminalSafeStream]:
    """``sys.stderr`` replaced by a :class:`TerminalSafeStream` over it (one a stream, kept), put back on the way out."""
    previous = sys.stderr
    if isinstance(previous, TerminalSafeStream):
        yield previous
        return
    safe = _SAFE.get(id(previous))
    if safe is None or safe.stream is not previous:
        safe = _SAFE[id(previous)] = TerminalSafeStream(previous)
    else:
        safe.buffer = _SafeBuffer(safe)  # no half a character left over from the block before
    sys.stderr = safe
    try:
        yield safe
    finally:
        if sys.stderr is safe:
            sys.stderr = previous


def describe_hidden(value: Any, limit: int = 3) -> str:
    """The hidden characters of ``value`` by code point and name: ``U+200B ZERO WIDTH SPACE, U+202E RIGHT-TO-LEFT OVERRIDE``."""
    import unicodedata

    found: list[str] = []
    for char in dict.fromkeys(_HIDDEN.findall("" if value is None else str(value))):
        if len(found) == limit:
            found.append("…")
            break
        name = unicodedata.name(char, "") or ("a lone surrogate" if 0xD800 <= ord(char) <= 0xDFFF else "a control character")
        found.append(f"U+{ord(char):04X} {name}")
    return ", ".join(found)
