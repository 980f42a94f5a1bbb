"""Input tokens of a text, for ``--dry-run``: the provider's tokenizer where evalx has one, else about 4 characters a token.

OpenAI models (the ``openai``, ``azure-openai`` and ``openai-responses``
definitions) are counted with ``tiktoken`` when it is installed
(``pip install 'evalx-runner[tokens]'``) and knows the model; its encoding
files are fetched once by tiktoken and cached, so an offline machine that
never fetched them falls back too (after at most :data:`LOAD_TIMEOUT_S`).
Every other model, and every fallback, is counted as
``len(text) // CHARS_PER_TOKEN + 1``: a rough figure (English prose is
about 4 characters a token; code and other languages take more tokens).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["CHARS_PER_TOKEN", "LOAD_TIMEOUT_S", "Counter", "counter_for"]

#: the characters-per-token estimate used without a tokenizer
CHARS_PER_TOKEN = 4
#: how long loading tiktoken's encoding (a download on first use) may take before the estimate is used instead
LOAD_TIMEOUT_S = 10.0
#: provider definitions whose models tiktoken counts
OPENAI_DEFINITIONS = frozenset({"openai", "azure-openai", "openai-responses"})


@dataclass(frozen=True)
class Counter:
    """Counts a text's tokens; ``method`` says how, for the dry run's line."""

    count: Callable[[str], int]
    method: str


def _by_characters(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN + 1


ESTIMATE = Counter(_by_characters, f"~{CHARS_PER_TOKEN} characters a token")


def counter_for(provider: str | None, model: str | None) -> Counter:
    """The counter for a provider definition's model: tiktoken's for an OpenAI model when it can load, else the estimate."""
    if provider not in OPENAI_DEFINITIONS or not model:
        return ESTIMATE
    return _tiktoken(model)


@lru_cache(maxsize=32)
def _tiktoken(model: str) -> Counter:
    try:
        import tiktoken
    except ImportError:
        return Counter(_by_characters, f"~{CHARS_PER_TOKEN} characters a token; pip install 'evalx-runner[tokens]' to count with tiktoken")
    try:
        name = tiktoken.encoding_name_for_model(model)
    except KeyError:
        return Counter(_by_characters, f"~{CHARS_PER_TOKEN} characters a token; tiktoken does not know {model!r}")
    found: list[object] = []

    def load() -> None:
        try:
            found.append(tiktoken.get_encoding(name))
        except Exception as exc:  # a download that failed (offline), a damaged cache: the estimate instead
            found.append(exc)

    thread = threading.Thread(target=load, name="evalx-tiktoken", daemon=True)
    thread.start()
    thread.join(LOAD_TIMEOUT_S)
    encoding = found[0] if found else None
    if encoding is None or isinstance(encoding, Exception):
        why = f" in {LOAD_TIMEOUT_S:g}s" if encoding is None else f": {type(encoding).__name__}"
        return Counter(_by_characters, f"~{CHARS_PER_TOKEN} characters a token; tiktoken could not load {name}{why}")
    encode = encoding.encode  # type: ignore[attr-defined]

    def count(text: str) -> int:
        return len(encode(text, disallowed_special=()))

    return Counter(count, f"tiktoken {name}")
