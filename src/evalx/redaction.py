"""Keep secrets in memory only.

A :class:`Redactor` knows every secret value of a run (API keys, engine keys,
values of environment variables named in ``secrets:`` or whose name looks
secret) and replaces them with ``***`` in anything written or printed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"

#: config keys whose values are always secret
SECRET_KEYS = frozenset({"api_key", "engine_key", "password", "token", "secret", "authorization", "x-api-key", "x-engine-key"})
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)

#: request headers whose values from the config are not secret; every other configured header's value is
HARMLESS_HEADERS = frozenset(
    {"accept", "accept-encoding", "accept-language", "cache-control", "connection", "content-type", "pragma", "user-agent"}
)

#: a value known only as a header's or an ambient environment variable's is masked in free text from this length
#: (DESIGN "Secrets in headers": ``X-Tenant: evals`` must not blank every "evals")
FREE_TEXT_MIN = 8


def looks_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def harmless_header(name: Any) -> bool:
    return isinstance(name, str) and name.lower() in HARMLESS_HEADERS


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        #: (lower-case name, value) of the config's secret headers: masked under any ``headers:`` whatever their length
        self._headers: set[tuple[str, str]] = set()
        for s in secrets:
            self.add(s)

    def add(self, value: Any, min_len: int = 4) -> None:
        """Mask ``value`` in free text; very short values would mask ordinary text (4 chars is the floor)."""
        if isinstance(value, str) and len(value) >= max(4, min_len) and value not in self._secrets:
            self._secrets.add(value)
            alts = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in alts))

    def add_header(self, name: Any, value: Any) -> None:
        """A header value from the config: a secret unless ``name`` is harmless (free text: from 8 chars).

        ``Authorization: Bearer TOKEN`` also masks ``TOKEN`` alone, as a server may echo just that.
        """
        if harmless_header(name) or not isinstance(value, str) or not isinstance(name, str):
            return
        self._headers.add((name.lower(), value))
        self.add(value, FREE_TEXT_MIN)
        scheme, _, credential = value.strip().partition(" ")
        if credential and scheme.isalpha():
            self.add(credential.strip(), FREE_TEXT_MIN)

    def add_environment(self, env: Mapping[str, str], names: Iterable[str] = ()) -> None:
        """Values of environment variables named like secrets, or listed in ``names`` (free text: from 8 chars).

        They reach outputs without ``${VAR}``: ``{{ env.ENGINE_KEY }}`` in a template, or a
        callable quoting ``os.environ`` in its exception.
        """
        listed = set(names)
        for name, value in env.items():
            if name in listed or looks_secret_name(name):
                self.add(value, FREE_TEXT_MIN)

    def __bool__(self) -> bool:
        return bool(self._secrets or self._headers)

    def text(self, value: str) -> str:
        if self._pattern is None or not value:
            return value
        return self._pattern.sub(MASK, value)

    def obj(self, value: Any) -> Any:
        """A copy of ``value`` with every secret string masked (and secret keys' values)."""
        if self._pattern is None and not self._headers:
            return _mask_keys(value)
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self._value_of(k, v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.obj(v) for v in value]
        return value

    def _value_of(self, key: Any, value: Any) -> Any:
        if _is_secret_key(key) and value not in (None, ""):
            return MASK
        if key == "headers" and isinstance(value, dict) and self._headers:
            return {k: (MASK if isinstance(k, str) and (k.lower(), v) in self._headers else self.obj(v)) for k, v in value.items()}
        return self.obj(value)


def _is_secret_key(key: Any) -> bool:
    return isinstance(key, str) and key.lower() in SECRET_KEYS


def _mask_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (MASK if _is_secret_key(k) and v not in (None, "") else _mask_keys(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_keys(v) for v in value]
    return value
