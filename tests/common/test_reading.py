"""``evalx.common.reading``, the one way evalx opens a file to read it: the limits, which the CLI tests cannot reach cheaply.

The CLI tests (tests/datasets/test_files_that_are_not_files.py,
tests/results/test_run_files_that_are_not_files.py) cover FIFOs and devices
through the real commands; these check the size limits with small kinds.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from evalx.common.reading import FileKind, check_regular, lines, open_regular, read_bytes, read_text
from evalx.errors import EvalxError, UnreadableFile

SMALL = FileKind("a small file", 10)


def test_a_whole_file_past_its_kinds_limit_is_refused_naming_the_limit(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 11)
    with pytest.raises(UnreadableFile) as info:
        read_bytes(tmp_path / "f", SMALL, shown="f")
    assert str(info.value) == "f: larger than the 10 bytes limit for a small file"
    assert info.value.errno == errno.EFBIG and isinstance(info.value, OSError) and isinstance(info.value, EvalxError)
    (tmp_path / "f").write_bytes(b"x" * 10)
    assert read_bytes(tmp_path / "f", SMALL) == b"x" * 10


def test_text_that_is_not_utf8_and_missing_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"ok\n\xff")
    with pytest.raises(UnreadableFile, match=r"f: not UTF-8 text \(line 2, byte 3\)"):
        read_text(tmp_path / "f", SMALL, shown="f")
    with pytest.raises(UnreadableFile) as info:
        read_text(tmp_path / "nope", SMALL, shown="nope")
    assert info.value.missing and str(info.value) == "nope: no such file"


def test_a_line_past_its_limit_is_skipped_unheld_and_stands_as_none(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"short\n" + b"y" * 5000 + b"\n123456789\nlast")
    with open_regular(tmp_path / "f") as f:
        assert list(lines(f, SMALL)) == [b"short\n", None, b"123456789\n", b"last"]
    (tmp_path / "g").write_bytes(b"z" * 5000)  # a last line with no end, past the limit
    with open_regular(tmp_path / "g") as f:
        assert list(lines(f, SMALL)) == [None]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_not_regular_files_are_refused_before_they_are_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to(tmp_path / "pipe")
    (tmp_path / "dir").mkdir()
    for name, what in (("pipe", "a FIFO"), ("link", "a FIFO"), ("dir", "a directory")):
        with pytest.raises(UnreadableFile, match=rf"^{name}: not a regular file \({what}\)$"):
            open_regular(tmp_path / name, shown=name)
        with pytest.raises(UnreadableFile):
            check_regular(tmp_path / name)
    if Path("/dev/zero").exists():
        with pytest.raises(UnreadableFile, match=r"not a regular file \(a character device\)"):
            read_bytes("/dev/zero", SMALL)
