"""``evalx init``: a small, working starting point, from one of the starters in ``config/starters/``.

Each starter is a folder of files written as they are (a ``.tmpl`` suffix is
dropped: the starters' Python files are not evalx modules), plus
``evalconfig.schema.json`` beside the config for editors (the config's
``$schema`` line points at it; ``evalx schema --write`` refreshes it).
The provider starter can target a shipped provider instead of its demo server
(``--provider NAME``): its ``evalconfig.yaml`` is then written from the
definition (:mod:`evalx.config.provider_starter`) and the demo server is left out.
Nothing that exists is overwritten: one existing file and nothing is written.
A ``.gitignore`` with ``runs/`` and ``.evalx/`` (the run folders and the
response cache) comes too; a folder's own ``.gitignore`` keeps every line
and gains those it lacks (:func:`ignore_run_folders`, as ``cargo init`` does),
so no run is committed by accident.
"""

from __future__ import annotations

from pathlib import Path

from evalx.errors import UnknownTemplate

__all__ = [
    "DEFAULT_TEMPLATE",
    "GITIGNORE",
    "NEXT_STEPS",
    "SCHEMA_FILE",
    "TEMPLATES",
    "UnknownTemplate",
    "ignore_run_folders",
    "next_steps",
    "scaffold",
    "schema_path",
    "write_schema",
]

STARTERS = Path(__file__).with_name("starters")
#: the starters, in the order ``evalx init --help`` lists them
TEMPLATES = ("python", "provider", "engine", "judge", "matrix")
DEFAULT_TEMPLATE = "python"
#: the schema file written beside a config (the scaffolded ``$schema`` line points at it)
SCHEMA_FILE = "evalconfig.schema.json"

#: what a starter's ``.gitignore`` holds: what a run writes beside the config, results rather than sources
GITIGNORE = "# evalx: the run folders and the response cache (evalx init)\nruns/\n.evalx/\n"

#: what to do after ``evalx init --template NAME DIR`` (``{dir}`` is DIR)
NEXT_STEPS = {
    "python": ["cd {dir} && evalx run"],
    "provider": [
        "cd {dir}",
        'eval "$(python demo_server.py --background)"   # the demo model server, on a free port: exports DEMO_PORT',
        "evalx run",
        "kill $DEMO_PID   # stop the demo server",
    ],
    "engine": [
        "cd {dir}",
        'eval "$(python demo_engine.py --background)"   # the demo engine, on a free port: exports DEMO_PORT',
        "evalx run",
        "kill $DEMO_PID   # stop the demo engine",
    ],
    "judge": ["cd {dir} && evalx run"],
    "matrix": ["cd {dir} && evalx run --matrix"],
}


def _files(template: str) -> dict[Path, Path]:
    """``{relative path written: starter file}`` of a starter."""
    root = STARTERS / template
    out = {}
    for src in sorted(root.rglob("*")):
        if src.is_file() and "__pycache__" not in src.parts:
            rel = src.relative_to(root)
            out[rel.with_name(rel.name.removesuffix(".tmpl"))] = src
    return out


#: the starter that ``--provider NAME`` points at a provider, and the file of it that stands in for one
PROVIDER_TEMPLATE = "provider"
_DEMO_SERVER = Path("demo_server.py")


def next_steps(template: str, provider: str | None = None) -> list[str]:
    """What to do after ``evalx init`` (``{dir}`` is the folder): the provider's setup steps with ``--provider``."""
    if provider is None:
        return NEXT_STEPS[template]
    from evalx.config import provider_starter

    return provider_starter.next_steps(provider_starter.load(provider))


def scaffold(directory: Path, template: str = DEFAULT_TEMPLATE, provider: str | None = None) -> list[Path]:
    """Write the starter ``template`` into ``directory`` (the provider starter for ``provider``, when given); the files written.

    Raises :class:`UnknownTemplate` (its message lists the choices), :class:`~evalx.errors.UnknownProvider`
    (the same for providers) and :class:`FileExistsError` (naming the first file that exists) before writing anything.
    """
    if template not in TEMPLATES:
        raise UnknownTemplate(f"unknown template {template!r}; choose one of: {', '.join(TEMPLATES)}")
    if provider is not None and template != PROVIDER_TEMPLATE:
        raise UnknownTemplate(f"--provider goes with --template {PROVIDER_TEMPLATE}, not --template {template}")
    files = {directory / rel: src.read_text(encoding="utf-8") for rel, src in _files(template).items()}
    if provider is not None:
        from evalx.config import provider_starter

        files[directory / "evalconfig.yaml"] = provider_starter.config_text(provider_starter.load(provider))
        del files[directory / _DEMO_SERVER]
    files[directory / SCHEMA_FILE] = _schema_text()
    for path in files:
        if path.exists() or path.is_symlink():
            raise FileExistsError(str(path))
    ignore = directory / ".gitignore"
    if not (ignore.exists() or ignore.is_symlink()):  # the user's own .gitignore is not an error: ignore_run_folders adds to it
        files[ignore] = GITIGNORE
    written = []
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8") as out:  # never over a file made meanwhile
            out.write(text)
        written.append(path)
    return written


#: what a starter's ``.gitignore`` must ignore, and the spellings of each that already do
_IGNORED = {"runs/": ("runs", "runs/", "/runs", "/runs/"), ".evalx/": (".evalx", ".evalx/", "/.evalx", "/.evalx/")}


def ignore_run_folders(directory: Path) -> list[str]:
    """Add ``runs/`` and ``.evalx/`` to ``directory``'s own ``.gitignore`` where it lacks them; the lines added.

    Its lines are kept as they are; a link or anything but a regular file is left alone.
    """
    from evalx.common.atomic import write_text
    from evalx.common.reading import CONFIG, read_text
    from evalx.errors import UnreadableFile

    ignore = directory / ".gitignore"
    if ignore.is_symlink() or not ignore.is_file():
        return []
    try:
        text = read_text(ignore, CONFIG)
    except (UnreadableFile, UnicodeDecodeError):  # not text evalx can add to: left as it is
        return []
    present = {line.strip() for line in text.splitlines()}
    missing = [entry for entry, spellings in _IGNORED.items() if not present.intersection(spellings)]
    if missing:
        lead = "" if not text or text.endswith("\n") else "\n"
        write_text(
            ignore, text + lead + "# evalx: the run folders and the response cache (evalx init)\n" + "".join(f"{m}\n" for m in missing)
        )
    return missing


def _schema_text() -> str:
    from evalx.config.schema import schema_json

    return schema_json()


def write_schema(path: Path) -> Path:
    """Write the config schema (the types registered now: built-ins, installed and loaded plugins) to ``path``."""
    from evalx.common.atomic import write_text

    write_text(path, _schema_text())  # atomic: a link at ``path`` is replaced, never written through
    return path


def schema_path(given: str, config_path: Path | None) -> Path:
    """Where ``evalx schema --write [PATH]`` writes: PATH (a folder gets the file name), else beside the config, else here."""
    if given:
        path = Path(given)
        return path / SCHEMA_FILE if path.is_dir() else path
    if config_path is not None:
        return config_path.parent / SCHEMA_FILE
    return Path(SCHEMA_FILE)
