"""``.env`` files: ``env_file:`` in the config and ``--env-file PATH``, loaded before ``${VAR}`` is resolved.

The files are read with python-dotenv (``KEY=value``, ``export``, quotes,
comments, ``${VAR}`` inside values). Later files win over earlier ones (the
config's, then ``--env-file``'s, each in order), and the process environment
wins over all of them unless ``override`` is set (``env_file: {path: ...,
override: true}``, ``--env-override``). The values go into the process
environment, so every reader sees them: ``${VAR}`` in the config, ``{{ env.X }}``
in templates, a provider's key variable, user code and hooks. Every value is a
secret: the config's redactor masks it in results, reports, logs and errors.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evalx.common.documents import KeyPath, display_path, format_path
from evalx.common.reading import CONFIG, read_text
from evalx.errors import ConfigError, Issue, MissingExtra, UnreadableFile

__all__ = ["EnvFile", "apply_env_files", "config_env_files"]


@dataclass(frozen=True)
class EnvFile:
    """One ``.env`` file to load, and where it was named (for errors)."""

    path: Path
    named_in: str  # the config file, or "--env-file"
    line: int | None = None
    key: str = ""


def config_env_files(data: object, lines: Mapping[KeyPath, int], config_file: str, base_dir: Path) -> tuple[list[EnvFile], bool]:
    """The files the config's ``env_file:`` names (relative to its folder), and whether they override the environment."""
    if not isinstance(data, Mapping) or "env_file" not in data:
        return [], False
    value = data["env_file"]
    override = False
    at: KeyPath = ("env_file",)
    if isinstance(value, Mapping):
        override = value.get("override") is True
        value = value.get("path")
        at = ("env_file", "path")
    entries = value if isinstance(value, list) else [value]
    files = []
    for i, entry in enumerate(entries):
        path: KeyPath = (*at, i) if isinstance(value, list) else at
        if not isinstance(entry, str) or not entry:
            continue  # the schema says what is wrong with it
        files.append(EnvFile(base_dir / entry, config_file, lines.get(path) or lines.get(at), format_path(path)))
    return files, override


def apply_env_files(files: Sequence[EnvFile], env: MutableMapping[str, str], *, override: bool = False) -> dict[str, str]:
    """Load ``files`` into ``env`` (see the module's docstring); the values loaded, for the redactor.

    A missing file, an unreadable one or a line that is not ``KEY=value`` is a
    :class:`ConfigError` naming the file and line.
    """
    if not files:
        return {}
    try:
        from dotenv import dotenv_values
        from dotenv.parser import parse_stream
    except ImportError:  # pragma: no cover - a core dependency
        raise MissingExtra("env_file: needs python-dotenv: pip install python-dotenv") from None
    merged: dict[str, str] = {}
    issues: list[Issue] = []
    for file in files:
        shown = display_path(file.path)
        try:
            text = read_text(file.path, CONFIG, shown=shown)
        except UnreadableFile as exc:  # missing, a folder, a FIFO, too large, not UTF-8
            issues.append(Issue(file.named_in, file.line, file.key, f"env file {shown}: {exc.reason}"))
            continue
        bad = [b.original.line for b in parse_stream(io.StringIO(text)) if b.error]
        if bad:
            issues.append(Issue(shown, bad[0], "", "not a KEY=value line (a .env file: KEY=value, # comments, optional export)"))
            continue
        # ${VAR} inside a value sees the file's earlier lines and the process environment
        values = dotenv_values(stream=io.StringIO(text), interpolate=True)
        merged.update({k: v for k, v in values.items() if v is not None})
    if issues:
        raise ConfigError(issues)
    loaded = {}
    for name, value in merged.items():
        if override or name not in env:
            env[name] = value
            loaded[name] = value
    return loaded
