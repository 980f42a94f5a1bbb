"""The baseline run of a CI job: the base branch's last run, downloaded as an artifact and unpacked into a run folder.

:func:`fetch_baseline` asks GitHub (:func:`evalx.ci.github.find_baseline_artifact`)
or GitLab (:func:`evalx.ci.gitlab.find_baseline_artifact`) for the zip and
:func:`extract_run` takes out of it only what a baseline is read from
(:data:`BASELINE_FILES`), so nothing else of the old run is kept or grows
from job to job. No baseline (a first run, an expired artifact) and an API
that fails are a warning, never an error: the run goes on without one, and
its baseline gates are n/a.

The zip is untrusted: only regular members directly inside the chosen run
folder, with plain names, are written, each within :data:`MAX_FILE_BYTES`.
"""

from __future__ import annotations

import json
import logging
import posixpath
import tempfile
import zipfile
from pathlib import Path
from typing import IO

from evalx.ci import github, gitlab
from evalx.errors import EvalxError, ForgeError

__all__ = ["BASELINE_FILES", "extract_run", "fetch_baseline"]

log = logging.getLogger(__name__)

#: what a baseline is read from: the cells, the figures, the run's record, its review marks
BASELINE_FILES = ("results.jsonl", "summary.json", "run.json", "reviews.jsonl")
#: the largest file taken out of an artifact
MAX_FILE_BYTES = 1024**3


def extract_run(zip_path: Path, dest: Path) -> Path | None:
    """The run folder in the zip (the shallowest folder with a ``results.jsonl``; of several, the newest by name) into ``dest``.

    None when the zip holds no run. ``dest`` is made; it must not hold files already.
    """
    try:
        archive = zipfile.ZipFile(zip_path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise EvalxError(f"the baseline artifact is not a zip file: {exc}") from None
    with archive:
        folders: dict[str, dict[str, zipfile.ZipInfo]] = {}
        for info in archive.infolist():
            name = info.filename
            if info.is_dir() or "\\" in name or name.startswith("/") or ".." in name.split("/"):
                continue
            folder, base = posixpath.split(name)
            if base in BASELINE_FILES:
                folders.setdefault(folder, {})[base] = info
        runs = [f for f, files in folders.items() if "results.jsonl" in files]
        if not runs:
            return None
        chosen = min(runs, key=lambda f: (f.count("/") if f else -1, _newest_first(f)))
        if dest.exists() and any(dest.iterdir()):
            raise EvalxError(f"--dest {dest}: the folder is not empty")
        dest.mkdir(parents=True, exist_ok=True)
        for base, info in folders[chosen].items():
            if info.file_size > MAX_FILE_BYTES:
                raise EvalxError(f"the baseline artifact's {info.filename} is larger than {MAX_FILE_BYTES:,} bytes")
            with archive.open(info) as src, (dest / base).open("xb") as out:
                _copy(src, out, info.filename)
    return dest


def _newest_first(folder: str) -> tuple[int, ...]:
    """A sort key that puts the lexically greatest folder (the newest run id) first."""
    return tuple(-ord(c) for c in folder)


def _copy(src: IO[bytes], out: IO[bytes], name: str) -> None:
    """Copy at most :data:`MAX_FILE_BYTES` (a zip may lie about a member's size)."""
    written = 0
    while chunk := src.read(1 << 20):
        written += len(chunk)
        if written > MAX_FILE_BYTES:
            raise EvalxError(f"the baseline artifact's {name} is larger than {MAX_FILE_BYTES:,} bytes")
        out.write(chunk)


async def fetch_baseline(forge: str, dest: Path, *, branch: str, name: str) -> Path | None:
    """Restore the baseline into ``dest``: ``forge`` ``github`` (``name``: the artifact) or ``gitlab`` (``name``: the job).

    The run folder, or None (a warning says why) when there is none or the API failed.
    """
    with tempfile.TemporaryDirectory(prefix="evalx-baseline-") as tmp:
        zip_path = Path(tmp) / "artifact.zip"
        try:
            if forge == "github":
                gh = github.GitHubJob.from_env()
                async with gh.client() as api:
                    found = await github.find_baseline_artifact(api, gh, branch, name, zip_path)
                where = f"no successful run of this workflow on {branch!r} with an artifact {name!r}"
            else:
                gl = gitlab.GitLabJob.from_env()
                async with gl.client(download=True) as api:
                    found = "yes" if await gitlab.find_baseline_artifact(api, gl, branch, name, zip_path) else None
                where = f"no artifacts of job {name!r} in the latest successful pipeline of {branch!r}"
        except ForgeError as exc:
            log.warning("no baseline: %s", exc)
            return None
        if found is None:
            log.warning("no baseline yet (%s): the baseline gates are n/a", where)
            return None
        try:
            run = extract_run(zip_path, dest)
        except EvalxError as exc:
            log.warning("no baseline: %s", exc)
            return None
        if run is None:
            log.warning("no baseline: the artifact holds no run folder (no results.jsonl)")
            return None
    log.info("baseline: run %s, restored into %s", _run_id(run), run)
    return run


def _run_id(run: Path) -> str:
    try:
        with (run / "run.json").open(encoding="utf-8") as f:
            return str(json.load(f).get("run_id") or run.name)
    except (OSError, ValueError, AttributeError):
        return run.name
