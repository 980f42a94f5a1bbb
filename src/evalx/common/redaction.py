"""Keep secrets in memory only.

A :class:`Redactor` knows every secret value of a run (API keys, engine keys,
values of environment variables named in ``secrets:`` or whose name looks
secret, credentials carried by URLs) and replaces them with ``***`` in
anything written or printed.

URLs carry credentials in two places, and this module is the one that knows
it: the userinfo (``http://alice:PASSWORD@host/``) and query or fragment
parameters named like keys, tokens, secrets, passwords or signatures
(``?api_key=...``, ``&sig=...``). :func:`url_secrets` finds them,
:meth:`Redactor.add_url` registers them (the config's URLs, the targets'
resolved URLs, URLs in environment values), :func:`redact_url` masks them in
one URL, :func:`shown_url` is a URL as messages show it and
:func:`split_userinfo` takes the userinfo out of a URL before it is sent (as
a Basic ``Authorization`` header).
"""

from __future__ import annotations

import base64
import re
import urllib.parse
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


#: the OpenTelemetry variables that carry an exporter's request headers (``key=value,...``): their values are secrets
OTEL_HEADER_VARIABLES = frozenset(f"OTEL_EXPORTER_OTLP{signal}_HEADERS" for signal in ("", "_TRACES", "_METRICS", "_LOGS"))

#: a URL inside free text (a config value, an environment value)
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]+")
#: query (or fragment) parameters whose values are credentials: ``api_key``, ``access_token``, ``sig``, ``X-Amz-Signature``...
_SECRET_PARAM = re.compile(r"key|token|secret|passw|pwd|credential|signature|auth|session|^sig$|^code$", re.I)


def looks_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def harmless_header(name: Any) -> bool:
    return isinstance(name, str) and name.lower() in HARMLESS_HEADERS


# ------------------------------------------------------------------ credentials in URLs


def secret_param(name: str) -> bool:
    """Whether a URL query parameter named ``name`` carries a credential (``api_key``, ``token``, ``sig``...)."""
    return bool(_SECRET_PARAM.search(name))


def _netloc(url: str) -> str | None:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return None
    return parts.netloc or None


def url_secrets(url: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The credentials ``url`` carries: ``(anchored, bare)``.

    ``anchored`` pairs each credential as written in the URL, with what marks
    it, to its masked form: ``//alice:pw@`` → ``//***@``, ``api_key=sk-1`` →
    ``api_key=***``. ``bare`` are the secret values alone, as written and
    percent-decoded, and the Basic ``Authorization`` credential the userinfo
    becomes: a server may echo any of them.
    """
    anchored: list[tuple[str, str]] = []
    bare: list[str] = []
    netloc = _netloc(url)
    if netloc is None:
        return anchored, bare
    if "@" in netloc:
        userinfo = netloc.rpartition("@")[0]
        anchored.append((f"//{userinfo}@", f"//{MASK}@"))
        password = userinfo.partition(":")[2]
        if password:  # a user name alone is masked in the URL only
            bare += [password, urllib.parse.unquote(password), userinfo, basic_credential(userinfo)]
    _, _, after = url.partition(netloc)
    for piece in re.split(r"[?#&;]", after)[1:]:  # the query's and the fragment's parameters (not the path)
        name, eq, value = piece.partition("=")
        if eq and value and secret_param(urllib.parse.unquote_plus(name)):
            anchored.append((f"{name}={value}", f"{name}={MASK}"))
            bare += [value, urllib.parse.unquote_plus(value)]
    return anchored, bare


def basic_credential(userinfo: str) -> str:
    """The base64 credential of the Basic ``Authorization`` header for a URL's ``user:password``."""
    user, _, password = userinfo.partition(":")
    plain = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    return base64.b64encode(plain.encode("utf-8")).decode("ascii")


def split_userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without its ``user:password@``, and the Basic ``Authorization`` header value it stood for (or None).

    This is what aiohttp would send for a URL with userinfo; taking it out
    first keeps the password out of every URL the HTTP layer handles.
    """
    netloc = _netloc(url)
    if netloc is None or "@" not in netloc:
        return url, None
    userinfo = netloc.rpartition("@")[0]
    return url.replace(f"//{userinfo}@", "//", 1), "Basic " + basic_credential(userinfo)


def redact_url(url: str) -> str:
    """``url`` with its userinfo and secret parameters masked: ``http://***@host/v1?api_key=***&model=x``."""
    for written, masked in url_secrets(url)[0]:
        url = url.replace(written, masked)
    return url


def shown_url(url: str) -> str:
    """``url`` as messages show it: no user:password@, no query string nor fragment (keys sometimes ride there)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return redact_url(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")) if netloc else redact_url(url)


# ------------------------------------------------------------------ the redactor


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        #: what a secret is replaced with, when not plain ``***`` (``//alice:pw@`` → ``//***@``)
        self._replacements: dict[str, str] = {}
        self._pattern: re.Pattern[str] | None = None
        #: (lower-case name, value) of the config's secret headers: masked under any ``headers:`` whatever their length
        self._headers: set[tuple[str, str]] = set()
        for s in secrets:
            self.add(s)

    def add(self, value: Any, min_len: int = 4) -> None:
        """Mask ``value`` in free text; very short values would mask ordinary text (4 chars is the floor)."""
        if isinstance(value, str) and len(value) >= max(4, min_len):
            self._add(value, MASK)

    def _add(self, value: str, replacement: str) -> None:
        if value in self._secrets:
            return
        self._secrets.add(value)
        if replacement != MASK:
            self._replacements[value] = replacement
        alts = sorted(self._secrets, key=len, reverse=True)  # the longest first: ``//alice:pw@`` before ``pw``
        self._pattern = re.compile("|".join(re.escape(s) for s in alts))

    def add_url(self, url: Any) -> None:
        """Mask the credentials ``url`` carries (:func:`url_secrets`) wherever they appear.

        The forms anchored in the URL (``//user:password@``, ``api_key=VALUE``)
        are masked whatever their length; the bare values, as header values
        are, from 8 characters (a password ``pass`` must not blank "passed").
        """
        if not isinstance(url, str):
            return
        anchored, bare = url_secrets(url)
        for written, masked in anchored:
            self._add(written, masked)
        for value in bare:
            self.add(value, FREE_TEXT_MIN)

    def add_urls_in(self, text: Any) -> None:
        """:meth:`add_url` for every URL inside ``text`` (a config value may be a URL or quote one)."""
        if isinstance(text, str) and "://" in text:
            for match in _URL_IN_TEXT.finditer(text):
                self.add_url(match.group())

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
            if name in OTEL_HEADER_VARIABLES:  # `k=v,k2=v2`: headers an exporter sends, each value a secret
                for name_value in value.split(","):
                    key, _, header = name_value.partition("=")
                    self.add_header(key.strip(), urllib.parse.unquote(header.strip()))
            if "://" in value:  # HTTP_PROXY=http://user:pw@proxy:3128, DATABASE_URL...
                self.add_urls_in(value)

    def __bool__(self) -> bool:
        return bool(self._secrets or self._headers)

    def text(self, value: str) -> str:
        if self._pattern is None or not value:
            return value
        if self._replacements:
            return self._pattern.sub(self._replace, value)
        return self._pattern.sub(MASK, value)

    def _replace(self, match: re.Match[str]) -> str:
        return self._replacements.get(match.group(), MASK)

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
