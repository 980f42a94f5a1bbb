"""Where the files evalx ships beside its code live: ``schemas/`` and ``providers/``.

A wheel carries them as ``evalx/_data/{schemas,providers}`` (pyproject
force-includes them); a checkout or an editable install has them at the repo
root. :func:`data_dir` finds either, so evalx works from any directory.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[3]  # src/evalx/targets/shipped.py -> the checkout


def data_dir(name: str) -> Path:
    """The directory holding the shipped ``name`` (``"schemas"`` or ``"providers"``)."""
    try:
        packaged = resources.files("evalx") / "_data" / name
        if packaged.is_dir():
            return Path(str(packaged))
    except (ModuleNotFoundError, NotADirectoryError, FileNotFoundError):  # pragma: no cover - zipped or odd installs
        pass
    return _REPO_ROOT / name
