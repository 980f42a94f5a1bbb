"""A case's ``context``: the passages a grounded answer is checked against — inline, from ``context_file:``, or a column.

``context`` is one passage (a string) or a list of passages (strings).
``context_file: PATH`` reads it from a file instead, the path relative to
the folder of the file the case is written in (the config's folder for
inline cases and a dataset's ``defaults:``), and not leaving the config's
folder (the rule of the config's ``_file`` keys, :func:`evalx.common.templates.resolve_in_folder`)
— unless the dataset itself lies outside it, then its own folder. A
``.json``, ``.yaml`` or ``.yml`` file holds a string or a list of strings;
any other file is one passage, its text. A column read through a
dataset's ``fields:`` (``fields: {context: retrieved_docs}``) that holds a
JSON list as text (``'["passage 1", "passage 2"]'``) becomes that list.
Each file is read once per dataset.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

from evalx.common.documents import DocumentError, format_path, load_json, load_yaml
from evalx.common.json_types import JSONObject
from evalx.common.templates import TemplateFileError, read_template_file, resolve_in_folder
from evalx.errors import ContextFileError

__all__ = ["CONTEXT_PROPERTIES", "ContextFileError", "ContextFiles", "from_column"]

#: the case fields of a context, as the case schema declares them
CONTEXT_PROPERTIES: dict[str, JSONObject] = {
    "context": {
        "type": ["string", "array"],
        "items": {"type": "string"},
        "description": "What a grounded answer is checked against (faithfulness, context_recall): one passage, or a list of passages.",
    },
    "context_file": {
        "type": "string",
        "minLength": 1,
        "description": "Read the context from this file (relative to the file the case is in): a .json/.yaml file "
        "holding a string or a list of strings, or any other file as one passage.",
    },
}

_STRUCTURED = (".json", ".yaml", ".yml")


class ContextFiles:
    """Reads the ``context_file:`` values of one dataset's cases, each file once."""

    def __init__(self, base_dir: Path, config_file: str) -> None:
        self.base_dir = base_dir  # the config's folder
        self.config_file = config_file  # a case shown as from this file is written in the config
        self._read: dict[tuple[str, str], str | list[str] | ContextFileError] = {}

    def read(self, case_file: str, name: str) -> str | list[str]:
        """The context ``name`` names for a case written in ``case_file`` (as shown); :class:`ContextFileError` says why not."""
        folder = "" if case_file == self.config_file else PurePosixPath(case_file.replace("\\", "/")).parent.as_posix()
        key = (folder, name)
        found = self._read.get(key)
        if found is None:
            try:
                found = self._load(folder, name)
            except ContextFileError as exc:
                found = exc
            self._read[key] = found
        if isinstance(found, ContextFileError):
            raise found
        return found

    def _load(self, folder: str, name: str) -> str | list[str]:
        posix = name.replace("\\", "/")
        if PurePosixPath(posix).is_absolute() or posix.startswith("~") or (len(name) > 1 and name[1] == ":"):
            raise ContextFileError(f"context_file {name!r}: an absolute path; give a path relative to the dataset file's folder")
        root = self.base_dir
        full_folder = (self.base_dir / folder).resolve() if folder else self.base_dir.resolve()
        if not full_folder.is_relative_to(self.base_dir.resolve()):
            root = full_folder  # a dataset outside the config's folder: its own folder is the limit
            rel = os.path.normpath(posix)
        else:
            rel = os.path.normpath(str(PurePosixPath(full_folder.relative_to(self.base_dir.resolve()).as_posix()) / posix))
        rel = rel.replace("\\", "/")
        try:
            if not os.path.lexists(resolve_in_folder(root, rel, what="context_file")):  # a FIFO or a device: read_template_file says so
                raise ContextFileError(
                    f"context_file {name!r}: no such file {rel}" + (f" (in {root.as_posix()})" if root != self.base_dir else "")
                )
            text = read_template_file(root, rel, what="context_file")
        except TemplateFileError as exc:
            message = str(exc).replace(repr(rel), repr(name), 1)
            if root != self.base_dir:
                message = message.replace("the config's folder", "the dataset's folder")
            raise ContextFileError(message) from None
        suffix = PurePosixPath(posix).suffix.lower()
        if suffix not in _STRUCTURED:
            return text.removesuffix("\n").removesuffix("\r")  # the file's last line end is not part of the passage
        shown = PurePosixPath(folder, posix).as_posix() if folder else posix
        try:
            loaded = load_json(text, shown) if suffix == ".json" else load_yaml(text, shown, interpolate=False)
        except DocumentError as exc:
            first = exc.problems[0]
            where = f"{shown}:{first.line}" if first.line else shown
            raise ContextFileError(f"context_file {name!r}: {where}: {first.message}") from None
        data = loaded.data
        if isinstance(data, str):
            return data
        if isinstance(data, list):
            for i, item in enumerate(data):
                if not isinstance(item, str):
                    line = loaded.line_of((i,))
                    where = f"{shown}:{line}" if line else shown
                    raise ContextFileError(
                        f"context_file {name!r}: {where} {format_path((i,))}: a passage must be a string, not {_kind(item)}"
                    )
            return list(data)
        raise ContextFileError(f"context_file {name!r}: {shown} must hold a string or a list of strings (passages), not {_kind(data)}")


def from_column(value: Any) -> Any:
    """A context read from a column: a JSON list written as text becomes the list; anything else is as read."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value  # "[1] The first passage..." is text
        if isinstance(parsed, list):
            return parsed
    return value


def _kind(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", type(None): "null", bool: "a boolean"}
    return names.get(type(value), type(value).__name__)
