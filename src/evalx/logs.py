"""evalx's own lines on stderr (``evalx: warning: ...``, ``evalx: resuming ...``): the stdlib's logging, and the one handler that prints them.

Every module logs to ``logging.getLogger(__name__)``, under the ``evalx``
logger: a warning (``log.warning``) or a note (``log.info``), never a
stream passed by hand. :func:`printing` prints the records as the lines
users know — ``evalx: warning: MESSAGE`` for a warning, ``evalx: MESSAGE``
for a note — on stderr. The command line prints them for the whole command;
:func:`evalx.run` prints them for the run unless the program has configured
logging itself (a handler on the root or the ``evalx`` logger), in which
case they go to its handlers, as any library's records do.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["LOGGER", "LineFormatter", "printing"]

#: the logger every evalx module's logger sits under
LOGGER = "evalx"


class LineFormatter(logging.Formatter):
    """A record as evalx's line: ``evalx: warning: MESSAGE`` (a warning or worse), ``evalx: MESSAGE`` (a note)."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        return f"evalx: warning: {text}" if record.levelno >= logging.WARNING else f"evalx: {text}"


_lock = threading.Lock()
#: while some block prints: [the handler, how many blocks use it, the evalx logger's level before]
_active: list[Any] = []


@contextmanager
def printing(stream: TextIO | None = None, *, unless_configured: bool = False) -> Iterator[None]:
    """Print evalx's warnings and notes on ``stream`` (``sys.stderr`` as it is now) for the block.

    ``unless_configured``: print nothing when logging is configured already
    (the records go to the program's handlers). Blocks may nest or overlap
    (runs on two threads): the first one's handler serves them all.
    """
    logger = logging.getLogger(LOGGER)
    with _lock:
        if _active:
            _active[1] += 1
            used = True
        elif unless_configured and logger.hasHandlers():
            used = False
        else:
            handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
            handler.setFormatter(LineFormatter())
            _active[:] = [handler, 1, logger.level]
            logger.addHandler(handler)
            if logger.getEffectiveLevel() > logging.INFO:  # the notes (resuming, pairwise) are lines users see
                logger.setLevel(logging.INFO)
            used = True
    try:
        yield
    finally:
        if used:
            with _lock:
                _active[1] -= 1
                if not _active[1]:
                    handler, _, level = _active
                    _active.clear()
                    logger.removeHandler(handler)
                    logger.setLevel(level)
