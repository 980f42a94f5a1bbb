"""Two toy agents for the matrix example: one stable, one flaky — reproducibly.

``flaky`` answers some questions right only some of the time, like a model
sampled at a high temperature. So that a run can be checked, its flakiness is
a fixed pattern over the calls for each case rather than chance: with
``--repeat 4`` the ``capital`` case passes 3 of 4 repeats and ``refund``
1 of 4, whatever order the repeats run in.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

ANSWERS = {
    "arithmetic": "2 + 2 = 4.",
    "capital": "The capital of France is Paris.",
    "refund": "You can get a refund within 30 days of delivery.",
    "shipping": "Standard shipping takes 3 to 5 business days.",
    "greeting": "Hello! Welcome to Acme support.",
}

#: per case, which calls (counted from 0, in blocks of 4) the flaky agent gets right
RIGHT_ON = {"capital": {0, 1, 2}, "refund": {0}}

_calls: Counter[str] = Counter()
_lock = threading.Lock()


def stable(question: str, case: dict[str, Any]) -> str:
    """Always the right answer."""
    return ANSWERS.get(case["id"], "I don't know.")


def flaky(question: str, case: dict[str, Any]) -> str:
    """Right on a fixed share of calls for some cases, always right for the others."""
    case_id = case["id"]
    with _lock:
        call = _calls[case_id]
        _calls[case_id] += 1
    right_on = RIGHT_ON.get(case_id)
    if right_on is None or call % 4 in right_on:
        return ANSWERS.get(case_id, "I don't know.")
    return "Sorry, I am not sure about that."
