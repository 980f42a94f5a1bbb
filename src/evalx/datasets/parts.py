"""A case's ``input`` given as parts (text, image, document): checked, its files read, each part made a reference.

See :mod:`evalx.common.attachments` for the shape. A ``path`` is relative to
the folder of the file the case is written in (the config's folder for
inline cases), and may not leave the config's folder (unless the dataset
itself lies outside it: then its own folder), as ``context_file:``. Each
file is read once per dataset, through :mod:`evalx.common.reading` (a
regular file, at most 20 MiB).
"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path, PurePosixPath

from evalx.common.attachments import MEDIA_TYPES, PART_TYPES, guess_media_type, keep
from evalx.common.json_types import JSON, JSONObject
from evalx.common.reading import ATTACHMENT, read_bytes
from evalx.common.templates import TemplateFileError, resolve_in_folder
from evalx.errors import UnreadableFile

__all__ = ["PART_SCHEMA", "AttachmentFiles", "PartProblem"]

#: the schema of one part of a case's input (the loader words its own messages; this is for editors and docs)
PART_SCHEMA: JSONObject = {
    "type": "object",
    "properties": {
        "type": {"enum": list(PART_TYPES)},
        "text": {"type": "string", "description": "type text: the text."},
        "path": {"type": "string", "minLength": 1, "description": "An image or a PDF, relative to the file the case is in."},
        "url": {"type": "string", "minLength": 1, "description": "type image: an image the provider fetches itself."},
        "data": {"type": "string", "minLength": 1, "description": "The bytes, base64-encoded (with media_type)."},
        "media_type": {"type": "string", "description": "image/png, image/jpeg, image/gif, image/webp or application/pdf."},
    },
    "required": ["type"],
    "additionalProperties": False,
}

_KEYS = {
    "text": ("type", "text"),
    "image": ("type", "path", "url", "data", "media_type"),
    "document": ("type", "path", "data", "media_type"),
}

#: (where under the part, message)
PartProblem = tuple[tuple[str | int, ...], str]


class AttachmentFiles:
    """Reads the files a dataset's parts name (each once) and turns parts into references."""

    def __init__(self, base_dir: Path, config_file: str) -> None:
        self.base_dir = base_dir
        self.config_file = config_file
        self._read: dict[tuple[str, str], tuple[str, int] | str] = {}  # (folder, name) -> (sha256, size) or why not

    def resolve(self, case_file: str, value: list[JSON]) -> tuple[list[JSON], list[PartProblem]]:
        """The parts of ``value`` as references, and the problems (``((index, key...), message)``)."""
        out: list[JSON] = []
        problems: list[PartProblem] = []
        if not value:
            return out, [((), "a list of parts must hold at least one part")]
        for i, part in enumerate(value):
            if not isinstance(part, dict):
                problems.append(((i,), f"a part must be a mapping, not {type(part).__name__}"))
                continue
            kind = part.get("type")
            if kind not in PART_TYPES:
                problems.append(
                    ((i, "type") if "type" in part else (i,), f"a part's type must be one of {', '.join(PART_TYPES)}, not {kind!r}")
                )
                continue
            allowed = _KEYS[str(kind)]
            bad = [k for k in part if k not in allowed]
            if bad:
                problems.append(((i, bad[0]), f"unknown key {bad[0]!r} in a {kind} part (allowed: {', '.join(allowed)})"))
                continue
            if kind == "text":
                if not isinstance(part.get("text"), str):
                    problems.append(((i,), "a text part needs 'text', a string"))
                else:
                    out.append({"type": "text", "text": part["text"]})
                continue
            ref, problem = self._attachment(case_file, str(kind), part)
            if problem is not None:
                problems.append(((i, *problem[0]), problem[1]))
            else:
                out.append(ref)
        return out, problems

    def _attachment(self, case_file: str, kind: str, part: JSONObject) -> tuple[JSONObject, PartProblem | None]:
        given = [k for k in ("path", "url", "data") if k in part]
        if len(given) != 1:
            how = "path, url or data" if kind == "image" else "path or data"
            return {}, ((), f"a {kind} part needs exactly one of {how}" + (f" (it has {', '.join(given)})" if given else ""))
        key = given[0]
        value = part[key]
        if not isinstance(value, str) or not value:
            return {}, ((key,), f"{key} must be a non-empty string")
        media = part.get("media_type")
        if media is not None and (not isinstance(media, str) or media not in MEDIA_TYPES[kind]):
            return {}, (("media_type",), f"media_type of a {kind} must be one of {', '.join(MEDIA_TYPES[kind])}, not {media!r}")
        if key == "url":
            if not value.startswith(("https://", "http://")):
                return {}, (("url",), f"url must start with https:// or http://, not {value[:40]!r}")
            ref: JSONObject = {"type": kind, "url": value}
            if media is not None:
                ref["media_type"] = media
            return ref, None
        if key == "data":
            if media is None:
                return {}, ((), f"a {kind} given as data needs media_type ({', '.join(MEDIA_TYPES[kind])})")
            try:
                data = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                return {}, (("data",), "data is not valid base64")
            if len(data) > ATTACHMENT.limit:
                return {}, (("data",), f"data holds more than the {ATTACHMENT.limit // (1024 * 1024)} MiB limit for an attachment")
            return {"type": kind, "media_type": media, "sha256": keep(data), "size": len(data)}, None
        if media is None:
            media = guess_media_type(value, kind)
            if media is None:
                return {}, (
                    ("path",),
                    f"cannot tell the media type of {value!r} from its extension: give media_type ({', '.join(MEDIA_TYPES[kind])})",
                )
        found = self._file(case_file, value)
        if isinstance(found, str):
            return {}, (("path",), found)
        digest, size = found
        return {"type": kind, "path": value, "media_type": media, "sha256": digest, "size": size}, None

    def _file(self, case_file: str, name: str) -> tuple[str, int] | str:
        folder = "" if case_file == self.config_file else PurePosixPath(case_file.replace("\\", "/")).parent.as_posix()
        cached = self._read.get((folder, name))
        if cached is None:
            cached = self._load(folder, name)
            self._read[(folder, name)] = cached
        return cached

    def _load(self, folder: str, name: str) -> tuple[str, int] | str:
        posix = name.replace("\\", "/")
        root = self.base_dir
        base = self.base_dir.resolve()
        full_folder = (self.base_dir / folder).resolve() if folder else base
        if not full_folder.is_relative_to(base):
            root = full_folder  # a dataset outside the config's folder: its own folder is the limit
            rel = os.path.normpath(posix)
        else:
            rel = os.path.normpath(str(PurePosixPath(full_folder.relative_to(base).as_posix()) / posix))
        rel = rel.replace("\\", "/")
        try:
            path = resolve_in_folder(root, rel, what="path")
            data = read_bytes(path, ATTACHMENT, shown=rel)
        except TemplateFileError as exc:
            return str(exc).replace(repr(rel), repr(name), 1)
        except UnreadableFile as exc:
            return str(exc)
        return keep(data), len(data)
