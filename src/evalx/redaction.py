"""Keep secrets in memory only.

A :class:`Redactor` knows every secret value of a run (API keys, engine keys,
values of environment variables named in ``secrets:`` or whose name looks
secret) and replaces them with ``***`` in anything written or printed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "***"

#: config keys whose values are always secret
SECRET_KEYS = frozenset({"api_key", "engine_key", "password", "token", "secret", "authorization", "x-api-key", "x-engine-key"})
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)


def looks_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        for s in secrets:
            self.add(s)

    def add(self, value: Any) -> None:
        # very short values would mask ordinary text; 4 chars is the floor
        if isinstance(value, str) and len(value) >= 4 and value not in self._secrets:
            self._secrets.add(value)
            alts = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in alts))

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def text(self, value: str) -> str:
        if self._pattern is None or not value:
            return value
        return self._pattern.sub(MASK, value)

    def obj(self, value: Any) -> Any:
        """A copy of ``value`` with every secret string masked (and secret keys' values)."""
        if self._pattern is None:
            return _mask_keys(value)
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: (MASK if _is_secret_key(k) and v not in (None, "") else self.obj(v)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.obj(v) for v in value]
        return value


def _is_secret_key(key: Any) -> bool:
    return isinstance(key, str) and key.lower() in SECRET_KEYS


def _mask_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (MASK if _is_secret_key(k) and v not in (None, "") else _mask_keys(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_keys(v) for v in value]
    return value
