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
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_RULE", "RULES", "Tally", "case_status", "rule_passes", "status_of"]

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
