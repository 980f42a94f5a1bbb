"""Stopping a run early: ``--max-failures N`` (``-x`` is 1).

The runner counts the cells that fail or error as their results come in;
once :attr:`FailureLimit.reached`, the executors start no new cell (the
cells in flight finish and are recorded). The cells never started have no
result, so the run is resumable like an interrupted one (``evalx run
--resume RUN``); it is recorded as stopped early (``run.json`` status
``stopped``, ``summary.json``'s ``stopped_early``) and exits as a failing run.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FailureLimit"]

_COUNTED = frozenset({"fail", "error"})


@dataclass
class FailureLimit:
    """How many cells may fail or error before no new cell starts, and how many have."""

    max_failures: int
    failures: int = 0

    def record(self, status: str) -> None:
        if status in _COUNTED:
            self.failures += 1

    @property
    def reached(self) -> bool:
        return self.failures >= self.max_failures

    def stopped(self) -> bool:
        """Asked by an executor before it starts a cell: True once the limit is reached."""
        return self.reached

    def message(self, not_run: int, resume: str) -> str:
        """The run's one line about it, with ``resume``: the command that finishes the run."""
        option = "-x" if self.max_failures == 1 else f"--max-failures {self.max_failures}"
        cells = "cell" if self.failures == 1 else "cells"
        return (
            f"stopped early ({option}): {self.failures} {cells} failed or errored; {not_run} planned "
            f"cell{'s' if not_run != 1 else ''} not run (finish with: {resume})"
        )
