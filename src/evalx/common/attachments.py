"""A case's input as parts: text, images and documents (PDF), and the attachment bytes they refer to.

A case's ``input`` may be a list of parts::

    input:
      - {type: text, text: "What is in this picture?"}
      - {type: image, path: images/cat.png}        # relative to the file the case is in
      - {type: image, url: "https://example.com/dog.jpg"}
      - {type: image, data: "iVBORw0KGgo...", media_type: image/png}
      - {type: document, path: docs/invoice.pdf}

The dataset loader reads each file once (through :mod:`evalx.common.reading`:
inside the config's folder, a regular file, at most 20 MiB) and turns every
part that carries bytes into a *reference*: ``{type, path?, media_type, sha256,
size}``. The reference is what the case holds, what its digest (``--resume``'s
fingerprint) and cache keys cover, and what results record: the bytes are never
written inline. The bytes themselves are kept here, once a process, by their
sha256, for the targets that send them (:func:`template_parts`,
:func:`python_parts`).
"""

from __future__ import annotations

import base64
import hashlib
import mimetypes
from collections.abc import Iterable
from typing import TypedDict

from evalx.common.json_types import JSON, JSONObject

__all__ = [
    "MEDIA_TYPES",
    "PART_TYPES",
    "TemplatePart",
    "data_of",
    "elided",
    "engine_parts",
    "guess_media_type",
    "is_parts",
    "keep",
    "part_kinds",
    "parts_text",
    "python_parts",
    "template_parts",
]

#: the kinds of part a case's input may hold
PART_TYPES = ("text", "image", "document")
#: the media types accepted for each kind of attachment
MEDIA_TYPES: dict[str, tuple[str, ...]] = {
    "image": ("image/png", "image/jpeg", "image/gif", "image/webp"),
    "document": ("application/pdf",),
}

#: attachment bytes by sha256 (hex), as the dataset loader read them
_STORE: dict[str, bytes] = {}


class TemplatePart(TypedDict, total=False):
    """One part as a provider definition's ``parts.message`` template (and the request ``body``) sees it.

    ``base64``: the bytes, base64-encoded (empty for a part given by ``url``);
    ``data_url``: ``data:MEDIA_TYPE;base64,...`` (or the ``url``); ``name``: the file's name (``document.pdf``).
    """

    type: str
    text: str
    media_type: str
    base64: str
    url: str
    data_url: str
    name: str
    path: str
    sha256: str
    size: int


def keep(data: bytes) -> str:
    """Keep ``data`` for the targets that send it; its sha256 (hex), which names it."""
    digest = hashlib.sha256(data).hexdigest()
    _STORE.setdefault(digest, data)
    return digest


def data_of(digest: str) -> bytes | None:
    """The bytes kept under ``digest``, or None (not read in this process)."""
    return _STORE.get(digest)


def guess_media_type(name: str, kind: str) -> str | None:
    """The media type of a file named ``name`` holding a part of ``kind``, when its extension is one ``kind`` accepts."""
    guessed, _ = mimetypes.guess_type(name)
    if guessed == "image/jpg":
        guessed = "image/jpeg"
    return guessed if guessed in MEDIA_TYPES.get(kind, ()) else None


def is_parts(value: object) -> bool:
    """Whether a case's input is a list of parts (as the loader accepted them)."""
    return isinstance(value, list) and bool(value) and all(isinstance(p, dict) and p.get("type") in PART_TYPES for p in value)


def part_kinds(value: object) -> set[str]:
    """The kinds of part (``image``, ``document``; never ``text``) a case's input holds."""
    if not is_parts(value):
        return set()
    assert isinstance(value, list)
    return {str(p["type"]) for p in value if isinstance(p, dict) and p.get("type") != "text"}


def parts_text(value: Iterable[JSON]) -> str:
    """The text parts joined (by a blank line): what a target that takes text only, or a judge, reads of the input."""
    return "\n\n".join(str(p.get("text", "")) for p in value if isinstance(p, dict) and p.get("type") == "text")


def _bytes(part: JSONObject) -> bytes | None:
    digest = part.get("sha256")
    return data_of(digest) if isinstance(digest, str) else None


def template_parts(value: Iterable[JSON]) -> list[TemplatePart]:
    """The parts as templates see them: each attachment with its ``base64`` and ``data_url`` (see :class:`TemplatePart`).

    Raises ``LookupError`` for an attachment whose bytes this process never read.
    """
    out: list[TemplatePart] = []
    for p in value:
        if not isinstance(p, dict):
            continue
        kind = str(p.get("type"))
        if kind == "text":
            out.append({"type": "text", "text": str(p.get("text", ""))})
            continue
        part: TemplatePart = {"type": kind, "media_type": str(p.get("media_type") or "")}
        url = p.get("url")
        if isinstance(url, str):
            part["url"] = part["data_url"] = url
            part["base64"], part["name"] = "", url.rsplit("/", 1)[-1]
        else:
            data = _bytes(p)
            if data is None:
                raise LookupError(f"the bytes of {p.get('path') or 'an inline ' + kind} (sha256 {p.get('sha256')}) were not read")
            encoded = base64.b64encode(data).decode("ascii")
            part["base64"], part["data_url"] = encoded, f"data:{part['media_type']};base64,{encoded}"
            path = p.get("path")
            part["name"] = str(path).rsplit("/", 1)[-1] if isinstance(path, str) else f"{kind}.{part['media_type'].rsplit('/', 1)[-1]}"
        path, digest, size = p.get("path"), p.get("sha256"), p.get("size")
        if isinstance(path, str):
            part["path"] = path
        if isinstance(digest, str):
            part["sha256"] = digest
        if isinstance(size, int):
            part["size"] = size
        out.append(part)
    return out


def python_parts(value: Iterable[JSON]) -> list[dict[str, object]]:
    """The parts as a Python target receives them: each reference with its ``data`` (the bytes; None for a ``url`` part)."""
    out: list[dict[str, object]] = []
    for p in value:
        if not isinstance(p, dict):
            continue
        part: dict[str, object] = dict(p)
        if p.get("type") != "text":
            part["data"] = None if isinstance(p.get("url"), str) else _bytes(p)
        out.append(part)
    return out


def engine_parts(value: Iterable[JSON]) -> list[JSON]:
    """The parts as an engine's request body carries them: text parts as they are; each attachment as
    ``{type, media_type, name, path?, sha256, size, data}`` with ``data`` the bytes base64-encoded (or ``{type, url}``)."""
    out: list[JSON] = []
    for p in template_parts(value):
        if p["type"] == "text":
            out.append({"type": "text", "text": p.get("text", "")})
        elif p.get("url"):
            out.append({"type": p["type"], "url": p.get("url", ""), "media_type": p.get("media_type", "")})
        else:
            part: JSONObject = {"type": p["type"], "media_type": p.get("media_type", ""), "name": p.get("name", "")}
            if "path" in p:
                part["path"] = p["path"]
            part.update(sha256=p.get("sha256", ""), size=p.get("size", 0), data=p.get("base64", ""))
            out.append(part)
    return out


def _elided_text(text: str) -> str | None:
    """``text`` with an attachment's base64 replaced by a reference, or None when it holds none."""
    if len(text) < 16:
        return None
    head, sep, encoded = text.partition(";base64,") if text.startswith("data:") else ("", "", text)
    try:
        data = base64.b64decode(encoded, validate=True)
    except (ValueError, TypeError):
        return None
    digest = hashlib.sha256(data).hexdigest()
    if digest not in _STORE:
        return None
    return f"{head}{sep}<attachment sha256:{digest[:16]}…, {len(data):,} bytes>"


def elided(value: JSON) -> JSON:
    """``value`` (a request body) with every attachment's base64 replaced by a short reference: what results keep of it.

    Free when no attachment was read in this process.
    """
    if not _STORE:
        return value
    if isinstance(value, str):
        short = _elided_text(value)
        return value if short is None else short
    if isinstance(value, list):
        return [elided(v) for v in value]
    if isinstance(value, dict):
        return {k: elided(v) for k, v in value.items()}
    return value
