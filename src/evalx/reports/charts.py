"""Inline SVG charts for the HTML report: no chart library, nothing fetched.

Each function returns an ``<svg>`` element as :class:`markupsafe.Markup`;
every label comes from a run (target ids, categories) and is escaped.
Charts scale to their container through ``viewBox``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from markupsafe import Markup, escape

from evalx.results.figures import usd as _usd

__all__ = ["color", "cost_per_target", "latency_distribution", "pass_rate_by_category", "trend"]

# distinguishable on white and in most colour-vision deficiencies (Okabe-Ito-like)
_PALETTE = ("#3f6fd8", "#e07b24", "#1d9a8a", "#c0449a", "#7a5cc9", "#8b9a1d", "#d14b4b", "#4b8fbf", "#9c6b3f", "#5b6473")
WIDTH = 560
LABEL_W = 120
#: categories drawn; the rest are counted in a note
MAX_CATEGORIES = 24
#: targets drawn in the per-target charts
MAX_TARGETS = 24


def color(index: int) -> str:
    return _PALETTE[index % len(_PALETTE)]


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _svg(height: float, body: list[str], label: str) -> Markup:
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {math.ceil(height)}" role="img" aria-label="{escape(label)}" '
        f'preserveAspectRatio="xMinYMin meet">{"".join(body)}</svg>'
    )


def _empty(text: str) -> Markup:
    return Markup('<p class="chart-empty">') + escape(text) + Markup("</p>")


def _legend(targets: Sequence[str], y: float) -> list[str]:
    parts: list[str] = []
    x: float = LABEL_W
    for i, target in enumerate(targets[:MAX_TARGETS]):
        label = _clip(target, 28)
        width = 18 + 6.4 * len(label)
        if x + width > WIDTH and x > LABEL_W:
            x, y = float(LABEL_W), y + 16
        parts.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" rx="2" fill="{color(i)}"/>')
        parts.append(f'<text x="{x + 14:.1f}" y="{y:.1f}" class="legend">{escape(label)}</text>')
        x += width + 10
    return parts


def _legend_height(targets: Sequence[str]) -> float:
    rows, x = 1, float(LABEL_W)
    for target in targets[:MAX_TARGETS]:
        width = 18 + 6.4 * len(_clip(target, 28))
        if x + width > WIDTH and x > LABEL_W:
            rows, x = rows + 1, float(LABEL_W)
        x += width + 10
    return rows * 16 + 8


def pass_rate_by_category(categories: Sequence[str], targets: Sequence[str], counts: dict[str, dict[str, list[int]]]) -> Markup:
    """Grouped horizontal bars: one group a category, one bar a target (pass / decided cells)."""
    shown = [c for c in categories if c in counts][:MAX_CATEGORIES]
    if not shown or not targets:
        return _empty("No decided cells to chart.")
    drawn = list(targets[:MAX_TARGETS])
    bar = max(4.0, min(12.0, 40.0 / len(drawn)))
    plot_w = WIDTH - LABEL_W - 36
    top = _legend_height(drawn) + 4
    body = _legend(drawn, 12)
    y = top
    for category in shown:
        group_h = bar * len(drawn) + 2 * (len(drawn) - 1)
        body.append(
            f'<text x="{LABEL_W - 8}" y="{y + group_h / 2 + 4:.1f}" text-anchor="end" class="axis-label">'
            f"{escape(_clip(category, 18))}<title>{escape(category)}</title></text>"
        )
        body.append(f'<rect x="{LABEL_W}" y="{y - 2:.1f}" width="{plot_w}" height="{group_h + 4:.1f}" class="track"/>')
        for i, target in enumerate(drawn):
            passed, decided = counts[category].get(target, [0, 0])
            by = y + i * (bar + 2)
            if not decided:
                continue
            rate = passed / decided
            w = max(1.5, rate * plot_w)
            tip = f"{target} · {category}: {passed}/{decided} pass ({rate * 100:.1f}%)"
            body.append(
                f'<rect x="{LABEL_W}" y="{by:.1f}" width="{w:.1f}" height="{bar:.1f}" rx="2" fill="{color(i)}">'
                f"<title>{escape(tip)}</title></rect>"
            )
            if bar >= 8:
                body.append(f'<text x="{LABEL_W + plot_w + 4}" y="{by + bar - 1.5:.1f}" class="value">{rate * 100:.0f}%</text>')
        y += group_h + 12
    for pct in (0, 50, 100):
        x = LABEL_W + plot_w * pct / 100
        body.append(f'<line x1="{x:.1f}" y1="{top - 4:.1f}" x2="{x:.1f}" y2="{y - 8:.1f}" class="grid"/>')
        body.append(f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle" class="tick">{pct}%</text>')
    svg = _svg(y + 10, body, "Pass rate by category per target")
    hidden = len([c for c in categories if c in counts]) - len(shown)
    return svg + (_empty(f"… and {hidden} more categories (see summary.json).") if hidden > 0 else Markup(""))


def _nice_ms(value: float) -> str:
    if value < 1:
        return f"{value:g}ms"
    if value < 1000:
        return f"{value:.0f}ms"
    return f"{value / 1000:g}s"


def latency_distribution(targets: Sequence[str], latencies: Mapping[str, Sequence[float]]) -> Markup:
    """Per target, a histogram of latencies on a shared log axis, with p50 and p95 marked."""
    drawn = [t for t in targets[:MAX_TARGETS] if latencies.get(t)]
    if not drawn:
        return _empty("No latencies recorded.")
    values = [v for t in drawn for v in latencies[t]]
    lo = max(min(values), 0.01)
    hi = max(max(values), lo * 1.5)
    lo_log, hi_log = math.log10(lo) - 0.05, math.log10(hi) + 0.05
    plot_w = WIDTH - LABEL_W - 16
    bins = 40
    row_h = 34

    def x_of(value: float) -> float:
        v = math.log10(max(value, lo))
        return LABEL_W + (v - lo_log) / (hi_log - lo_log) * plot_w

    body: list[str] = []
    y = 6.0
    for t_index, target in enumerate(targets[:MAX_TARGETS]):
        data = latencies.get(target)
        if not data:
            continue
        counts = [0] * bins
        for v in data:
            b = int((math.log10(max(v, lo)) - lo_log) / (hi_log - lo_log) * bins)
            counts[min(bins - 1, max(0, b))] += 1
        peak = max(counts)
        body.append(
            f'<text x="{LABEL_W - 8}" y="{y + row_h / 2 + 2:.1f}" text-anchor="end" class="axis-label">'
            f"{escape(_clip(target, 18))}<title>{escape(target)}</title></text>"
        )
        body.append(f'<line x1="{LABEL_W}" y1="{y + row_h - 6:.1f}" x2="{LABEL_W + plot_w}" y2="{y + row_h - 6:.1f}" class="grid"/>')
        bw = plot_w / bins
        for b, n in enumerate(counts):
            if not n:
                continue
            h = max(1.5, (row_h - 10) * n / peak)
            body.append(
                f'<rect x="{LABEL_W + b * bw + 0.5:.1f}" y="{y + row_h - 6 - h:.1f}" width="{bw - 1:.1f}" height="{h:.1f}" '
                f'fill="{color(t_index)}" opacity="0.8"><title>{n} cell{"s" if n != 1 else ""}</title></rect>'
            )
        ordered = sorted(data)
        for q, cls in ((50, "p50"), (95, "p95")):
            v = ordered[min(len(ordered) - 1, round((len(ordered) - 1) * q / 100))]
            x = x_of(v)
            body.append(
                f'<line x1="{x:.1f}" y1="{y + 2:.1f}" x2="{x:.1f}" y2="{y + row_h - 4:.1f}" class="mark {cls}">'
                f"<title>{escape(target)} p{q}: {_nice_ms(v)}</title></line>"
            )
        y += row_h
    # decade ticks (1, 10, 100ms, 1s...), plus 2x and 5x ticks on a narrow range
    ticks = []
    for exp in range(math.floor(lo_log), math.ceil(hi_log) + 1):
        for m in (1, 2, 5) if hi_log - lo_log < 2.5 else (1,):
            v = m * 10.0**exp
            if lo_log <= math.log10(v) <= hi_log:
                ticks.append(v)
    for v in ticks:
        x = x_of(v)
        body.append(f'<line x1="{x:.1f}" y1="6" x2="{x:.1f}" y2="{y:.1f}" class="grid faint"/>')
        body.append(f'<text x="{x:.1f}" y="{y + 12:.1f}" text-anchor="middle" class="tick">{_nice_ms(v)}</text>')
    body.append(f'<text x="{LABEL_W + plot_w}" y="{y + 26:.1f}" text-anchor="end" class="tick">solid: p50 · dashed: p95 · log scale</text>')
    return _svg(y + 32, body, "Latency distribution per target")


def cost_per_target(
    targets: Sequence[str],
    cost: dict[str, float | None],
    judge_cost: dict[str, float | None],
    tokens: dict[str, int],
) -> Markup:
    """Cost per target (target + judge, stacked); tokens instead when nothing was priced."""
    drawn = list(targets[:MAX_TARGETS])
    if not drawn:
        return _empty("No targets.")
    priced = any(cost.get(t) is not None or judge_cost.get(t) is not None for t in drawn)
    note = "lighter: judge cost"
    parts = {t: ((cost.get(t) or 0.0), (judge_cost.get(t) or 0.0)) for t in drawn}
    if not priced or max(a + b for a, b in parts.values()) <= 0:  # nothing priced, or all of it free (a local model)
        note = "no prices: tokens (input + output) shown instead" if not priced else "every priced cell cost $0: tokens shown instead"
        priced = False
        parts = {t: (float(tokens.get(t) or 0), 0.0) for t in drawn}
    peak = max((a + b for a, b in parts.values()), default=0.0)
    if peak <= 0:
        return _empty("No cost or tokens recorded.")
    plot_w = WIDTH - LABEL_W - 110
    bar = 16
    body: list[str] = []
    y = 8.0
    for i, target in enumerate(drawn):
        own, judge = parts[target]
        w_own = plot_w * own / peak
        w_judge = plot_w * judge / peak
        body.append(
            f'<text x="{LABEL_W - 8}" y="{y + bar - 4:.1f}" text-anchor="end" class="axis-label">'
            f"{escape(_clip(target, 18))}<title>{escape(target)}</title></text>"
        )
        body.append(f'<rect x="{LABEL_W}" y="{y:.1f}" width="{plot_w}" height="{bar}" class="track" rx="3"/>')
        if own:
            body.append(f'<rect x="{LABEL_W}" y="{y:.1f}" width="{max(1.5, w_own):.1f}" height="{bar}" rx="3" fill="{color(i)}"/>')
        if judge:
            body.append(
                f'<rect x="{LABEL_W + w_own:.1f}" y="{y:.1f}" width="{max(1.5, w_judge):.1f}" height="{bar}" rx="3" '
                f'fill="{color(i)}" opacity="0.45"/>'
            )
        if priced:
            label = _usd(cost.get(target)) + (f" + {_usd(judge)} judge" if judge else "")
        else:
            label = f"{int(own):,} tokens"
        body.append(f'<text x="{LABEL_W + max(w_own + w_judge, 0) + 6:.1f}" y="{y + bar - 4:.1f}" class="value">{escape(label)}</text>')
        y += bar + 10
    body.append(f'<text x="{LABEL_W}" y="{y + 8:.1f}" class="tick">{escape(note)}</text>')
    return _svg(y + 14, body, "Cost per target" if priced else "Tokens per target")


def trend(
    series: Mapping[str, Sequence[float | None]],
    labels: Sequence[str],
    *,
    title: str,
    fmt: Callable[[float], str],
    floor_zero: bool = True,
    ticks: Sequence[Sequence[str]] | None = None,
) -> Markup:
    """Lines over runs (oldest left): one line a target, a point per run it has a value in (``None``: a gap).

    ``labels`` name the runs (shown on hover); ``ticks`` (default: ``labels``),
    one or two short lines a run (a date, a run id), are written under the x
    axis for at most :data:`MAX_TICKS` runs spread evenly (the first and the
    last always); ``fmt`` writes an axis value (a percentage, money, milliseconds).
    """
    drawn = list(series)[:MAX_TARGETS]
    values = [v for t in drawn for v in series[t] if v is not None and math.isfinite(v)]
    if not values or not labels:
        return _empty(f"No {title.lower()} to chart.")
    low = 0.0 if floor_zero else min(values)
    high = max(values)
    if high <= low:
        high = low + (1.0 if high == 0 else abs(high) * 0.1)
    top = _legend_height(drawn) + 8
    plot_h, left, right = 140.0, 64.0, WIDTH - 12.0
    n = len(labels)

    def x(i: int) -> float:
        return left + (right - left) * (i / (n - 1) if n > 1 else 0.5)

    def y(v: float) -> float:
        return top + plot_h - (v - low) / (high - low) * plot_h

    body = _legend(drawn, 12.0)
    for v in (low, (low + high) / 2, high):
        body.append(f'<line x1="{left}" x2="{right}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>')
        body.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" class="axis">{escape(fmt(v))}</text>')
    for k, target in enumerate(drawn):
        points = [(i, v) for i, v in enumerate(series[target]) if v is not None and math.isfinite(v)]
        path = " ".join(f"{'M' if j == 0 else 'L'}{x(i):.1f},{y(v):.1f}" for j, (i, v) in enumerate(points))
        if len(points) > 1:
            body.append(f'<path d="{path}" fill="none" stroke="{color(k)}" stroke-width="2"/>')
        for i, v in points:
            tip = f"{target} · {labels[i]}: {fmt(v)}"
            body.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{color(k)}"><title>{escape(tip)}</title></circle>')
    shown = ticks if ticks is not None and len(ticks) == n else [(label,) for label in labels]
    positions = _tick_positions(n)
    for i in positions:
        tx, ty = x(i), top + plot_h + 18
        anchor = "middle" if len(positions) == 1 else "start" if i == 0 else "end" if i == n - 1 else "middle"
        lines = "".join(
            f'<tspan x="{tx:.1f}" dy="{0 if k == 0 else 15}">{escape(_clip_left(line, 15) if k else _clip(line, 15))}</tspan>'
            for k, line in enumerate(shown[i][:2])
        )
        body.append(f'<text x="{tx:.1f}" y="{ty:.1f}" text-anchor="{anchor}" class="tick">{lines}<title>{escape(labels[i])}</title></text>')
    return _svg(top + plot_h + 18 + TICK_ROOM, body, f"{title} per target over runs")


#: runs named under a trend's x axis (evenly spread, the first and the last always), and the height their two lines take
MAX_TICKS = 5
TICK_ROOM = 24


def _clip_left(text: str, width: int) -> str:
    """``text``'s end (a run id's distinct part is its last)."""
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def _tick_positions(n: int) -> list[int]:
    if n <= MAX_TICKS:
        return list(range(n))
    step = (n - 1) / (MAX_TICKS - 1)
    return sorted({round(k * step) for k in range(MAX_TICKS)})
