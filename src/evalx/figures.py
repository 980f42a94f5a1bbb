"""How figures read in every report: percentages, intervals, durations, money, counts."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["ci", "clip", "count", "duration", "finite", "ms", "pct", "usd"]


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


def pct(rate: float | None) -> str:
    return "—" if rate is None else f"{rate * 100:.1f}%"


def ci(interval: list[float] | None) -> str:
    return "—" if not interval else f"{interval[0] * 100:.1f}–{interval[1] * 100:.1f}%"


def ms(value: float | None) -> str:
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


def duration(seconds: float | None) -> str:
    return "—" if seconds is None else ms(seconds * 1000)


def count(n: int) -> str:
    if n < 10_000:
        return f"{n:,}"
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def usd(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:,.2f}" if value >= 100 else f"${value:.4f}"


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
