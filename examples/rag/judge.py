"""A scripted judge for the RAG example: reads the judge prompt and answers deterministically, offline.

evalx calls it like any Python target, ``grade(prompt, case=...)``. The data
it grades is in the prompt's tagged blocks (``<output-NONCE>``,
``<context-NONCE>`` with numbered passages, ``<input-NONCE>``,
``<reference-NONCE>``); which check is asking is in
``case["metadata"]["judge"]["kind"]``. Instead of a model's understanding it
compares words: a claim (a sentence of the answer) is supported when most of
its words occur in the context. It answers the way a model is asked to —
some reasoning, then the verdict as the last JSON object:

- faithfulness: ``{"unsupported": [...], "score": supported fraction}``
- context_recall: ``{"missing": [...], "score": found fraction}``
- answer_relevance: ``{"score": share of the question's words answered}``
- g_eval: ``{"steps": [...], "score": 1..scale}``

Swap it for a model (``judge: {target: {type: provider, provider: openai,
model: gpt-4.1}}``) to grade for real.
"""

from __future__ import annotations

import json
import re
from typing import Any

from answerer import sentences, words

_BLOCK = re.compile(r"<(input|output|context|reference)-([0-9a-f]{16})>\n(.*?)\n?</\1-\2>", re.S)
SUPPORTED = 0.75  # the share of a claim's words the context must hold


def blocks(prompt: str) -> dict[str, str]:
    return {m.group(1): m.group(3) for m in _BLOCK.finditer(prompt)}


def passages(block: str) -> list[str]:
    return [re.sub(r"^\[\d+\]\s*", "", line) for line in block.splitlines() if line.strip()]


def claims(text: str) -> list[str]:
    """The answer's sentences that state something (not "I'm sorry, but I can't find that...": about itself)."""
    return [s for s in sentences(text) if not re.match(r"(?i)i\b|i'm\b|sorry\b", s)]


def held(claim: str, context_words: set[str]) -> bool:
    mine = words(claim)
    return not mine or len(mine & context_words) / len(mine) >= SUPPORTED


def reply(reasoning: list[str], verdict: dict[str, Any]) -> str:
    return "\n".join(reasoning) + "\n" + json.dumps(verdict)


def grade(prompt: str, case: dict[str, Any]) -> str:
    meta = (case.get("metadata") or {}).get("judge") or {}
    kind = meta.get("kind")
    data = blocks(prompt)
    context_words = words(" ".join(passages(data.get("context", ""))))
    output = data.get("output", "")
    if kind in ("faithfulness", "context_recall"):
        items = claims(output) if kind == "faithfulness" else sentences(data.get("reference", ""))
        bad = [s for s in items if not held(s, context_words)]
        key = "unsupported" if kind == "faithfulness" else "missing"
        notes = [f"- {s!r}: {'not in' if s in bad else 'in'} the context" for s in items]
        score = 1.0 if not items else round(1 - len(bad) / len(items), 3)
        reason = f"{len(items) - len(bad)} of {len(items)} found in the context" if items else "no factual claim to check"
        return reply(notes, {key: bad, "score": score, "reason": reason})
    if kind == "answer_relevance":
        asked = words(data.get("input", ""))
        share = len(asked & words(output)) / len(asked) if asked else 0.0
        return reply(
            [f"The question asks about {sorted(asked)}."],
            {"score": round(share, 3), "reason": f"{share:.0%} of the question's words are answered"},
        )
    if kind == "g_eval":
        scale = int(re.search(r"to (\d+) \(it fully meets them\)", prompt).group(1)) if "fully meets them" in prompt else 5
        said = claims(output)
        unsupported = [s for s in said if not held(s, context_words)]
        score = max(1, min(scale, scale - max(0, len(said) - 2) - 2 * len(unsupported)))
        steps = ["Count the sentences (at most two).", "Check each sentence against the context."]
        return reply(steps, {"steps": steps, "score": score, "reason": f"{len(said)} sentences, {len(unsupported)} not in the context"})
    return "FAIL: this judge grades faithfulness, context_recall, answer_relevance and g_eval"
