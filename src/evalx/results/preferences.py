"""The cross-cell figures read from cell results: a pairwise judge's preferences per target pair, and judge-vs-function disagreements.

Both work from stored results alone, so ``evalx run``, ``evalx report`` and a
merge of shards give the same figures.

**Preferences.** A ``pairwise`` record is written on both of its cells
(:mod:`evalx.execution.pairwise_pass`); :class:`Preferences` keeps one per
comparison — keyed by dataset, case, the two targets, the repeat and the
criterion — whichever cell it was read from, and a later record of the same
comparison (a resumed run judged again) replaces the earlier one.

**Judge vs function.** Where a cell has a deterministic check and a
model-graded check with the same ``name:``, their verdicts are compared:
the function's is "every deterministic check of that name passed", the
judge's "every judge check of that name passed". Only conclusive verdicts
count (an error or no verdict on either side is not a disagreement). A
check is taken as judged when its result names its judge
(``details.judge``, or ``details.embedding`` for embeddings), which every
model-graded type records with a verdict.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any

from evalx.results.model import JudgeDisagreement, JudgeDisagreements, JudgePreference, PairwiseRow

__all__ = ["MAX_DISAGREEMENTS", "Disagreements", "Preferences"]

#: judge-vs-function disagreements listed in summary.json (the first ones in matrix order)
MAX_DISAGREEMENTS = 100


def _count(value: Any) -> int:
    return value if type(value) is int and value > 0 else 0


def _cost(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and value >= 0:
        return float(value)
    return None


class Preferences:
    """The pairwise judge's records of a run, one per comparison (slim: no replies), and their figures per pair."""

    def __init__(self) -> None:
        #: (dataset, case, a, b, repeat, criterion, name) -> (outcome, longer_won, calls, in, out, cached calls, cost)
        self._records: dict[tuple[Any, ...], tuple[str, bool | None, int, int, int, int, float | None]] = {}

    def __bool__(self) -> bool:
        return bool(self._records)

    def add(self, records: Any) -> None:
        """Count ``records`` (a cell's ``pairwise`` list, or the pass's records); anything malformed is ignored."""
        if not isinstance(records, list):
            return
        for r in records:
            if not isinstance(r, dict) or not isinstance(r.get("a"), str) or not isinstance(r.get("b"), str):
                continue
            key = (r.get("dataset"), r.get("case_id"), r["a"], r["b"], r.get("repeat"), r.get("criterion"), r.get("name"))
            winner = r.get("winner")
            if r.get("not_compared"):
                outcome = "not_compared"
            elif r.get("error") or winner is None:
                outcome = "error"
            elif winner == r["a"]:
                outcome = "a"
            elif winner == r["b"]:
                outcome = "b"
            else:
                outcome = "position_tie" if r.get("position_tie") else "tie"
            longer = r.get("longer_won")
            calls = _count(r.get("calls"))
            self._records[key] = (
                outcome,
                longer if isinstance(longer, bool) else None,
                calls,
                _count(r.get("input_tokens")),
                _count(r.get("output_tokens")),
                calls if r.get("cached") is True else 0,
                _cost(r.get("cost_usd")),
            )

    def per_pair(self) -> dict[tuple[str, str], JudgePreference]:
        """Each pair of targets' figures, as the pairwise rows carry them."""
        out: dict[tuple[str, str], JudgePreference] = {}
        for key, (outcome, longer, calls, _, _, _, cost) in self._records.items():
            pair = (str(key[2]), str(key[3]))
            fig = out.get(pair)
            if fig is None:
                fig = out[pair] = {
                    "compared": 0,
                    "wins_a": 0,
                    "wins_b": 0,
                    "ties": 0,
                    "position_ties": 0,
                    "errors": 0,
                    "not_compared": 0,
                    "longer_won": 0,
                    "length_decided": 0,
                    "longer_won_share": None,
                    "calls": 0,
                    "cost_usd": None,
                }
            fig["calls"] += calls
            if cost is not None:
                fig["cost_usd"] = (fig["cost_usd"] or 0.0) + cost
            if outcome == "not_compared":
                fig["not_compared"] += 1
                continue
            fig["compared"] += 1
            if outcome == "a":
                fig["wins_a"] += 1
            elif outcome == "b":
                fig["wins_b"] += 1
            elif outcome == "error":
                fig["errors"] += 1
            else:
                fig["ties"] += 1
                fig["position_ties"] += outcome == "position_tie"
            if outcome in ("a", "b") and longer is not None:
                fig["length_decided"] += 1
                fig["longer_won"] += longer
        for fig in out.values():
            if fig["length_decided"]:
                fig["longer_won_share"] = fig["longer_won"] / fig["length_decided"]
            if fig["cost_usd"] is not None:
                fig["cost_usd"] = round(fig["cost_usd"], 8)
        return out

    def annotate(self, rows: list[PairwiseRow]) -> None:
        """Add ``judge_preference`` to the pairwise rows of the pairs the judge compared (or tried to)."""
        if not self._records:
            return
        figures = self.per_pair()
        for row in rows:
            fig = figures.get((row["a"], row["b"]))
            if fig is not None:
                row["judge_preference"] = fig

    def usage(self) -> tuple[int, int, int, int]:
        """Judge calls, input tokens, output tokens and cached calls of every comparison."""
        totals = [0, 0, 0, 0]
        for _, _, calls, tokens_in, tokens_out, cached, _ in self._records.values():
            totals[0] += calls
            totals[1] += tokens_in
            totals[2] += tokens_out
            totals[3] += cached
        return totals[0], totals[1], totals[2], totals[3]

    def cost_by_target(self) -> dict[str, float]:
        """Each target's share of the comparisons' judge cost: half of each comparison's cost to each side."""
        out: dict[str, float] = {}
        for key, record in self._records.items():
            cost = record[6]
            if cost is None:
                continue
            for target in (str(key[2]), str(key[3])):
                out[target] = out.get(target, 0.0) + cost / 2
        return out


def _judged(assertion: Mapping[str, Any]) -> bool:
    details = assertion.get("details")
    return isinstance(details, dict) and ("judge" in details or "embedding" in details)


class Disagreements:
    """Judge-vs-function pairs, checked cell by cell (see the module docstring)."""

    def __init__(self) -> None:
        self.checked = 0
        self.total = 0
        #: max-heap (negated cell index, negated arrival) of the first MAX_DISAGREEMENTS rows in matrix order
        self._rows: list[tuple[float, int, JudgeDisagreement]] = []

    def add(self, result: Mapping[str, Any], assertions: Iterable[Any]) -> None:
        """Check one cell: called only for a cell with a named assertion."""
        sides: dict[str, tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]] = {}
        for a in assertions:
            if not isinstance(a, dict):
                continue
            name = a.get("name")
            if not isinstance(name, str) or not name:
                continue
            function, judge = sides.setdefault(name, ([], []))
            (judge if _judged(a) else function).append(a)
        for name, (function, judge) in sides.items():
            if not function or not judge:
                continue
            if any(a.get("passed") is None for a in (*function, *judge)):
                continue  # an error or no verdict on either side: nothing to compare
            self.checked += 1
            f_ok = all(a.get("passed") is True for a in function)
            j_ok = all(a.get("passed") is True for a in judge)
            if f_ok == j_ok:
                continue
            self.total += 1
            index = result.get("index")
            order = float(index) if type(index) is int else float("inf")
            if len(self._rows) < MAX_DISAGREEMENTS or -self._rows[0][0] > order:
                failing = judge if f_ok else function
                reason = next((str(a.get("reason") or "") for a in failing if a.get("passed") is False), "")
                repeat = result.get("repeat")
                row: JudgeDisagreement = {
                    "target": str(result.get("target") or ""),
                    "dataset": result.get("dataset"),
                    "case_id": result.get("case_id"),
                    "repeat": repeat if type(repeat) is int else 0,
                    "name": name,
                    "function": f_ok,
                    "judge": j_ok,
                    "function_types": [str(a.get("type")) for a in function],
                    "judge_types": [str(a.get("type")) for a in judge],
                    "reason": reason[:300],
                }
                heapq.heappush(self._rows, (-order, -self.total, row))
                if len(self._rows) > MAX_DISAGREEMENTS:
                    heapq.heappop(self._rows)

    def figures(self) -> JudgeDisagreements:
        rows = [row for _, _, row in sorted(self._rows, reverse=True)]
        return {"checked": self.checked, "total": self.total, "rows": rows}
