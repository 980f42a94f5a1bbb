"""How figures read in every report: percentages, intervals, durations, money, counts."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["ci", "clip", "count", "duration", "finite", "ms", "p_value", "pct", "points", "rate_limits_text", "target_cost", "usd", "whole"]


def finite(value: Any) -> float | None:
    """A stored figure as a finite float, or None for None, bools, NaN, infinities and anything not a number."""
    kind = type(value)  # the common cases first: a float, an int, None
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int:
        return float(value)  # finite whenever it converts (a huge int: OverflowError, as math.isfinite raises)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


# Each formatter takes a figure as stored: a value that is not a finite number (a summary.json restored from an
# artifact may hold a string, NaN, 1e999 or a list there) reads "—", as a missing one does, never an exception.


def pct(rate: Any) -> str:
    rate = finite(rate)
    return "—" if rate is None else f"{rate * 100:.1f}%"


def ci(interval: Any) -> str:
    low, high = (finite(interval[0]), finite(interval[1])) if isinstance(interval, (list, tuple)) and len(interval) == 2 else (None, None)
    return "—" if low is None or high is None else f"{low * 100:.1f}–{high * 100:.1f}%"


def ms(value: Any) -> str:
    value = finite(value)
    if value is None:
        return "—"
    if value < 10:
        return f"{value:.1f}ms"
    if value < 1000:
        return f"{value:.0f}ms"
    if value < 60_000:
        return f"{value / 1000:.2f}s"
    minutes, seconds = divmod(value / 1000, 60)
    return f"{minutes:.0f}m{seconds:04.1f}s"


def duration(seconds: Any) -> str:
    seconds = finite(seconds)
    return "—" if seconds is None else ms(seconds * 1000)


def whole(value: Any) -> str:
    """A stored count as its digits (``1234``); "—" for anything that is not a whole number of 0 or more."""
    return str(value) if type(value) is int and value >= 0 else "—"


def count(n: Any) -> str:
    if type(n) is not int:
        return whole(n)
    if n < 10_000:
        return f"{n:,}"
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def usd(value: Any) -> str:
    """Dollars: cents from $100, four decimals from a cent, and three significant digits under a cent.

    A small cost keeps its size: ``$0.000123`` a call, never ``$0.0001`` or
    ``$0.0000``. Every reporter formats money here (the HTML report's script
    has the same rule in ``fmtUsd``).
    """
    value = finite(value)
    if value is None:
        return "—"
    size = abs(value)
    sign = "-" if value < 0 else ""
    if size >= 100:
        return f"{sign}${size:,.2f}"
    if size >= 0.01 or size == 0:
        return f"{sign}${size:.4f}"
    if size < 1e-12:  # below any price: plain scientific notation rather than a wall of zeros
        return f"{sign}${size:.2e}"
    decimals = 2 - math.floor(math.log10(size))  # three significant digits
    text = f"{size:.{decimals}f}"
    if text.startswith("0.01"):  # rounded up to a cent (0.009996 → 0.0100): four decimals, as above
        text = f"{size:.4f}"
    return f"{sign}${text}"


def target_cost(value: float | None, missing: object) -> str:
    """A target's cost: :func:`usd`, or "unknown" when none of its cells could be priced (no price known for its model)."""
    if value is None and isinstance(missing, int) and missing > 0:
        return "unknown"
    return usd(value)


def p_value(p: float | None) -> str:
    """A p-value with three significant digits (``0.0312``, ``0.000122``, ``1``), never cut short."""
    if p is None:
        return "—"
    return f"{p:.3g}" if p >= 1e-4 else f"{p:.2e}"


def points(difference: float | None) -> str:
    """A difference of two rates in percentage points, signed (``+12.5 pts``)."""
    return "—" if difference is None else f"{difference * 100:+.1f} pts"


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def rate_limits_text(per_target: Any, show: Callable[[Any], str] = str, *, only_waits: bool = False) -> str | None:
    """What the providers' rate limits cost, per target that met one: ``bot: 3 × 429 · waited 12.4s · up to 16 in flight``.

    None when no target's cells went through an endpoint limiter (``only_waits``: or none met a 429 or
    waited a second in all). ``show`` shows a target id.
    """
    if not isinstance(per_target, dict):
        return None
    parts = []
    for target_id, figures in per_target.items():
        limits = figures.get("rate_limits") if isinstance(figures, dict) else None
        if not isinstance(limits, dict):
            continue
        hits = int(finite(limits.get("responses_429")) or 0)
        waited = finite(limits.get("wait_s")) or 0.0
        peak = int(finite(limits.get("max_concurrency")) or 0)
        if only_waits and not hits and waited < 1.0:
            continue
        parts.append(f"{show(target_id)}: {hits:,} × 429 · waited {duration(waited)} · up to {peak:,} in flight")
    return "; ".join(parts) or None
