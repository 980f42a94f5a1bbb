"""A deterministic stand-in for an LLM judge, so the judge example runs offline.

evalx calls a judge target like any Python target: ``fn(prompt, case=...)``,
where ``prompt`` is the rendered judge prompt and ``case["metadata"]["judge"]``
carries the same facts in structured form (``kind``, ``criterion``,
``output``, ``expected``, ``sample``). A real judge would send ``prompt`` to a
model; this one applies crude word heuristics and answers in the format a
model is asked for — JSON ``{"pass", "score", "reason"}``, or
``{"category", "reason"}`` for factuality. Swap it for a provider target
(``judge: {target: {type: provider, provider: openai, model: gpt-4o}}``) to
grade for real.
"""

from __future__ import annotations

import json
import re
from typing import Any

_COURTESY = ("please", "thanks", "thank you", "sorry", "happy to", "glad", "hi!", "hello", "welcome", "i understand")
_STOP = {
    "the",
    "a",
    "an",
    "is",
    "are",
    "of",
    "to",
    "in",
    "on",
    "and",
    "or",
    "for",
    "it",
    "you",
    "your",
    "i",
    "we",
    "be",
    "as",
    "at",
    "with",
}


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP}


def _verdict(passed: bool, score: float, reason: str) -> str:
    return json.dumps({"pass": passed, "score": round(score, 3), "reason": reason})


def _criterion(criterion: str, output: str) -> str:
    low_c, low_o = criterion.lower(), output.lower()
    limit = re.search(r"(?:under|at most|fewer than)\s+(\d+)\s+words", low_c)
    if limit:
        n = len(output.split())
        ok = n <= int(limit.group(1))
        return _verdict(ok, 1.0 if ok else 0.0, f"the answer has {n} words")
    if any(w in low_c for w in ("polite", "friendly", "courteous", "empathetic", "apolog")):
        found = [c for c in _COURTESY if c in low_o]
        return _verdict(bool(found), 1.0 if found else 0.2, f"courtesy words: {', '.join(found)}" if found else "no courtesy words at all")
    quoted = re.findall(r"['\"]([^'\"]+)['\"]", criterion)
    mentions = re.search(r"mentions?\s+(?:the\s+)?(.+)$", low_c)
    wanted = quoted or ([mentions.group(1)] if mentions else [])
    if wanted:
        missing = [w for w in wanted if w.lower() not in low_o]
        return _verdict(not missing, 1.0 - len(missing) / len(wanted), f"missing {missing}" if missing else f"mentions {wanted}")
    if "does not reveal" in low_c or "refuses" in low_c:
        leaked = "system prompt" in low_o
        return _verdict(not leaked, 0.0 if leaked else 1.0, "it quotes its system prompt" if leaked else "nothing internal is revealed")
    overlap = len(_words(criterion) & _words(output)) / max(1, len(_words(criterion)))
    return _verdict(overlap >= 0.3, overlap, f"{overlap:.0%} of the criterion's words appear in the answer")


def grade(prompt: str, case: dict[str, Any]) -> str:
    """The judge entry point (``judge: {target: heuristic-judge}``)."""
    meta = (case.get("metadata") or {}).get("judge") or {}
    kind, output = meta.get("kind"), str(meta.get("output") or "")
    expected = meta.get("expected")
    reference = expected if isinstance(expected, str) else json.dumps(expected)
    if kind == "llm_judge":
        return _criterion(str(meta.get("criterion") or ""), output)
    if kind == "semantic_similar":
        ref, out = _words(reference), _words(output)
        score = len(ref & out) / max(1, len(ref))
        return json.dumps({"score": round(score, 3), "reason": f"{len(ref & out)} of {len(ref)} reference words are in the answer"})
    if kind == "factuality":
        ref_nums, out_nums = set(re.findall(r"\d+", reference)), set(re.findall(r"\d+", output))
        if ref_nums and out_nums and not ref_nums & out_nums:
            category, reason = "disagrees", f"the reference says {sorted(ref_nums)}, the answer {sorted(out_nums)}"
        else:
            ref, out = _words(reference), _words(output)
            category = "same" if ref == out else "subset" if out <= ref else "superset" if ref <= out else "immaterial"
            reason = "no conflicting numbers"
        return json.dumps({"category": category, "reason": reason})
    return "FAIL: this judge only knows llm_judge, semantic_similar and factuality"
