"""Case-level verdicts from repeated samples: the ``repeat_pass_rule``.

A case run N times against a target gets one verdict, decided here and
nowhere else, so the summary, the JUnit file and the terminal matrix agree:

- skipped repeats (inconclusive) are evidence neither way and are left out;
  a case whose every repeat was skipped is ``skipped``;
- of the D decided repeats, k passed; the rule says whether the case passes:
  ``all`` k == D, ``majority`` (the default) k > D / 2 — strictly more than
  half, so 2 of 4 is a fail — and ``any`` k >= 1;
- a case that does not pass is ``fail`` when at least one repeat failed (an
  assertion did not hold), else ``error`` (every non-passing repeat errored);
- a case is *flaky* when 0 < k < D, whatever the rule decided.

A conversation (a case with ``turns:``) is also tallied turn by turn: a turn
passes in a repeat when its own checks all held, fails when one did not or
when the turn errored; a turn that was never reached, or has no checks, is no
evidence. Turn K is *flaky* when it passed in some repeats and failed in others.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_RULE", "RULES", "Tally", "TurnTallies", "case_status", "rule_passes", "status_of", "turn_outcomes"]

RULES = ("all", "majority", "any")
DEFAULT_RULE = "majority"


@dataclass(slots=True)
class Tally:
    """How the repeats of one case against one target came out."""

    passed: int = 0
    failed: int = 0
    errored: int = 0
    skipped: int = 0

    def add(self, status: str) -> None:
        if status == "pass":
            self.passed += 1
        elif status == "fail":
            self.failed += 1
        elif status == "skipped":
            self.skipped += 1
        else:  # "error", or a status nobody knows: never a silent pass
            self.errored += 1

    @property
    def runs(self) -> int:
        return self.passed + self.failed + self.errored + self.skipped

    @property
    def decided(self) -> int:
        return self.passed + self.failed + self.errored

    @property
    def flaky(self) -> bool:
        return 0 < self.passed < self.decided


def rule_passes(passed: int, decided: int, rule: str = DEFAULT_RULE) -> bool:
    """Whether ``passed`` of ``decided`` repeats make the case pass under ``rule``."""
    if rule not in RULES:
        raise ValueError(f"unknown repeat_pass_rule {rule!r} (one of {', '.join(RULES)})")
    if decided <= 0:
        return False
    if rule == "all":
        return passed == decided
    if rule == "any":
        return passed >= 1
    return 2 * passed > decided


def case_status(tally: Tally, rule: str = DEFAULT_RULE) -> str:
    """The case-level status (pass, fail, error, skipped) of a case's repeats."""
    return status_of(tally.passed, tally.failed, tally.errored, rule)


def status_of(passed: int, failed: int, errored: int, rule: str = DEFAULT_RULE) -> str:
    """:func:`case_status` from the counts of passing, failing and erroring repeats."""
    decided = passed + failed + errored
    if decided == 0:
        return "skipped"
    if rule_passes(passed, decided, rule):
        return "pass"
    return "fail" if failed else "error"


def turn_outcomes(turns: Any) -> Iterator[tuple[int, bool]]:
    """``(turn, passed)`` for each turn of a conversation cell's ``turns`` that decided something (1-based)."""
    if not isinstance(turns, list):
        return
    for n, turn in enumerate(turns, 1):
        if not isinstance(turn, dict):
            continue
        output = turn.get("output")
        if isinstance(output, dict) and output.get("error") is not None:
            yield n, False
            continue
        verdicts = [a.get("passed") for a in turn.get("assertions") or () if isinstance(a, dict)]
        if False in verdicts:
            yield n, False
        elif verdicts and all(v is True for v in verdicts):
            yield n, True


class TurnTallies:
    """Per-turn pass counts of conversation cases over their repeats: ``key -> {turn: [passed, decided]}``.

    Only conversation cells are added, so a run without ``turns:`` keeps nothing here.
    """

    __slots__ = ("_by_case",)

    def __init__(self) -> None:
        self._by_case: dict[str, dict[int, list[int]]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_case)

    def add(self, key: str, turns: Any) -> None:
        """Count one cell (one repeat) of the case ``key``: its ``turns`` records."""
        tallies = self._by_case.setdefault(key, {})
        for n, passed in turn_outcomes(turns):
            counts = tallies.setdefault(n, [0, 0])
            counts[0] += passed
            counts[1] += 1

    def flaky(self, key: str) -> list[tuple[int, int, int]]:
        """``(turn, passed, decided)`` for each turn of ``key`` that passed in some repeats and failed in others."""
        tallies = self._by_case.get(key)
        if not tallies:
            return []
        return [(n, p, d) for n, (p, d) in sorted(tallies.items()) if 0 < p < d]
