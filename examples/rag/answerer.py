"""A tiny answerer for the RAG example: it reads the passages a case carries and quotes the best sentence.

No retrieval and no model: ``answer(question, case=...)`` gets the case's
``context`` (inline, from ``context_file:`` or from a CSV column), splits it
into sentences and answers with the sentence that shares the most words with
the question — or declines when none shares any. One flaw is built in, so
the example has something to catch: asked about the warranty, it adds a
claim of its own that no passage supports ("It also covers accidental
damage.").
"""

from __future__ import annotations

import re
from typing import Any

_STOP = frozenset(
    re.findall(
        r"\w+",
        "a an and are at be by can do does for from get how i in is it long many much of on or the to what when which who with you your",
    )
)


def words(text: str) -> set[str]:
    """Content words, lower case, a plural's s dropped (shared with the scripted judge)."""
    out = set()
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if word not in _STOP:
            out.add(word[:-1] if len(word) > 3 and word.endswith("s") else word)
    return out


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


def answer(question: str, case: dict[str, Any]) -> str:
    context = case.get("context") or []
    passages = [context] if isinstance(context, str) else list(context)
    candidates = [s for p in passages for s in sentences(p)]
    asked = words(question)
    best = max(candidates, key=lambda s: len(words(s) & asked), default="")
    if not best or not words(best) & asked:
        return "I'm sorry, but I can't find that in the documents I was given."
    if "warranty" in asked:
        return best + " It also covers accidental damage."  # the planted hallucination
    return best
