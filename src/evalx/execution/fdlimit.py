"""The open-files limit a run needs: raised when the system allows it, else a warning before any cell runs.

Each request in flight holds a socket, so two HTTP targets at concurrency
200 need about 400 file descriptors besides the ones evalx itself keeps
open (results, reports, the cache, the interpreter's own). A soft
``RLIMIT_NOFILE`` below that used to show up only as cells failing with
"too many open files" in the middle of a run. Before the run starts the
soft limit is raised towards the hard one (as a mature server does); when
even the hard limit is too low, one warning says so and what to change.
"""

from __future__ import annotations

from collections.abc import Iterable

try:
    import resource
except ImportError:  # Windows: no RLIMIT_NOFILE to speak of
    resource = None  # type: ignore[assignment]

#: descriptors evalx keeps besides its sockets: results, reports, spools, the cache, stdio, imported modules
HEADROOM = 64


def needed_descriptors(in_flight: Iterable[int]) -> int:
    """Descriptors a run needs: one per request that may be in flight (per target: its concurrency, capped by its cells) plus headroom."""
    return sum(in_flight) + HEADROOM


def ensure_open_files(needed: int, what: str) -> str | None:
    """Raise the soft open-files limit to ``needed`` when the hard limit allows; else a warning (``what`` says who needs them)."""
    if resource is None:
        return None
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    goal = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if goal > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (goal, hard))
            soft = goal
        except (OSError, ValueError):
            pass
    if soft >= needed:
        return None
    return (
        f"the open-files limit is {soft} but {what} need about {needed}: cells may fail with 'too many open files'; "
        f"raise it (ulimit -n {needed}) or lower concurrency"
    )
