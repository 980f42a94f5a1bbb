"""A dataset's cases held compactly: each case packed into bytes, rebuilt as a :class:`Case` when a cell needs it.

A million cases as :class:`Case` objects take ~1.4 GB (a dict of 17 fields, a
list and two dicts each); packed with :mod:`marshal`, 64 cases to a
zlib-compressed block, they take ~15-40 bytes each (~130 packed but not
compressed). What the plan asks of every case (its id for
``--case``, category for ``--category``, repeat and targets to count cells,
whether a judge grades it) is kept in small columns beside the bytes, so
planning a run never rebuilds a case; a cell rebuilds its case when it runs
(a few microseconds).
"""

from __future__ import annotations

import hashlib
import json
import marshal
import pickle
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields
from operator import attrgetter
from typing import Any, overload

from evalx.models import Case

__all__ = ["DIGEST_SIZE", "FINGERPRINT_JSON", "CaseTable", "case_digest", "content_digest"]

_FIELDS = tuple(f.name for f in fields(Case))
_VALUES = attrgetter(*_FIELDS)  # a case's fields as a tuple, in Case's order
_new_case = object.__new__
_MARSHAL, _PICKLE = b"m", b"p"
_MARSHAL_TAG = _MARSHAL[0]
#: cases a compressed block holds
BLOCK = 64
#: decompressed blocks kept (targets reading their cases at different places each keep theirs)
_KEEP_BLOCKS = 16


class CaseTable(Sequence[Case]):
    """The cases of one dataset, in order: ``len``, indexing and iteration rebuild :class:`Case` objects.

    Each case is rebuilt fresh, so whoever gets one may change it without
    changing the table. :meth:`append` packs a case; the columns answer the
    plan's questions without rebuilding it.
    """

    def __init__(self, cases: Sequence[Case] = ()) -> None:
        # the packed cases, BLOCK at a time, each block compressed once full (similar cases compress ~4-10x);
        # _ends: where each case ends within its block; _open: the block being filled, as it is
        self._blocks: list[bytes] = []
        self._open = bytearray()
        self._ends = array("I")
        self._unpacked: OrderedDict[int, bytes] = OrderedDict()  # the blocks last read, decompressed
        # every case id, UTF-8, back to back (no str object a case)
        self._id_data = bytearray()
        self._id_ends = array("Q")
        #: per case: the number of its category in :attr:`categories`
        self._category = array("L")
        self.categories = _Distinct()
        #: per case: its ``repeat:`` (0: not set)
        self._repeat = array("L")
        #: per case: the number of its ``targets:`` in :attr:`target_lists` (0: every target)
        self._targets = array("L")
        self.target_lists = _Distinct([None])
        self._graded = bytearray()
        #: per case: :func:`case_digest` (DIGEST_SIZE bytes), when the loader made one
        self._digests = bytearray()
        for case in cases:
            self.append(case)

    def append(self, case: Case, *, graded: bool = False, digest: bytes | None = None) -> None:
        """Pack ``case`` (``graded``: a model grades one of its assertions; ``digest``: its :func:`case_digest`)."""
        values = _VALUES(case)
        try:
            tag, blob = _MARSHAL, marshal.dumps(values)
        except ValueError:  # a value marshal does not know (a YAML date...)
            tag, blob = _PICKLE, pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)
        packed = self._open
        packed += tag
        packed += blob  # (not tag + blob: a copy of the case's bytes)
        ends = self._ends
        ends.append(len(packed))
        if len(ends) % BLOCK == 0:
            self._blocks.append(zlib.compress(packed, 1))
            self._open = bytearray()
        ids = self._id_data
        ids += case.id.encode("utf-8", "surrogatepass")
        self._id_ends.append(len(ids))
        self._category.append(self.categories.number(case.category))
        self._repeat.append(case.repeat or 0)
        self._targets.append(0 if case.targets is None else self.target_lists.number(tuple(case.targets)))
        self._graded.append(1 if graded else 0)
        if digest is not None and len(self._digests) == DIGEST_SIZE * (len(self._ends) - 1):
            self._digests += digest

    def extend(self, other: CaseTable) -> None:
        """Append ``other``'s cases (as packed: its blocks are taken whole when this table ends on a block boundary)."""
        if len(self._ends) % BLOCK or self._open:
            for i in range(len(other)):
                self.append(other.case(i), graded=other.graded(i), digest=other.digest(i))
            return
        had_digests = len(self._digests) == DIGEST_SIZE * len(self._ends)
        self._blocks += other._blocks
        self._open = bytearray(other._open)
        self._ends += other._ends  # where each case ends within its block: blocks stay whole, so these stay true
        shift = len(self._id_data)
        self._id_data += other._id_data
        self._id_ends += array("Q", [end + shift for end in other._id_ends])
        categories = [self.categories.number(c) for c in other.categories]
        self._category += array("L", [categories[n] for n in other._category])
        target_lists = [self.target_lists.number(t) for t in other.target_lists]
        self._targets += array("L", [target_lists[n] for n in other._targets])
        self._repeat += other._repeat
        self._graded += other._graded
        if had_digests and len(other._digests) == DIGEST_SIZE * len(other._ends):
            self._digests += other._digests
        else:
            self._digests = bytearray()  # not every case has one: none is used (digest() says None)

    def forget_unpacked(self) -> None:
        """Drop the decompressed blocks kept for reading (they are made again when needed)."""
        self._unpacked.clear()

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, i: int) -> Case: ...
    @overload
    def __getitem__(self, i: slice) -> list[Case]: ...
    def __getitem__(self, i: int | slice) -> Case | list[Case]:
        if isinstance(i, slice):
            return [self.case(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("case index out of range")
        return self.case(i)

    def _block(self, b: int) -> bytes | bytearray:
        """Block ``b``, decompressed (the last few are kept: cells read their cases in order)."""
        if b == len(self._blocks):
            return self._open
        data = self._unpacked.get(b)
        if data is None:
            data = self._unpacked[b] = zlib.decompress(self._blocks[b])
            if len(self._unpacked) > _KEEP_BLOCKS:
                self._unpacked.popitem(last=False)
        else:
            self._unpacked.move_to_end(b)
        return data

    def case(self, i: int) -> Case:
        """Case ``i``, rebuilt."""
        data = self._block(i // BLOCK)
        start = self._ends[i - 1] if i % BLOCK else 0
        packed = data[start + 1 : self._ends[i]]  # a copy of ~100 bytes: cheaper than a memoryview made and released
        values = marshal.loads(packed) if data[start] == _MARSHAL_TAG else pickle.loads(packed)
        case = _new_case(Case)  # the fields as packed: Case.__init__ (defaults for what is given anyway) is skipped
        case.__dict__.update(zip(_FIELDS, values, strict=True))
        return case

    def __iter__(self) -> Iterator[Case]:
        for i in range(len(self)):
            yield self.case(i)

    # ---------------------------------------------------------------- the columns

    def case_id(self, i: int) -> str:
        start = self._id_ends[i - 1] if i else 0
        return self._id_data[start : self._id_ends[i]].decode("utf-8", "surrogatepass")

    def category(self, i: int) -> str:
        return str(self.categories[self._category[i]])

    def repeat(self, i: int) -> int | None:
        return self._repeat[i] or None

    def targets(self, i: int) -> tuple[str, ...] | None:
        only: tuple[str, ...] | None = self.target_lists[self._targets[i]]
        return only

    def targets_code(self, i: int) -> int:
        """The number of case ``i``'s ``targets:`` in :attr:`target_lists` (0: every target)."""
        return self._targets[i]

    def graded(self, i: int) -> bool:
        return bool(self._graded[i])

    def any_graded(self) -> bool:
        """Whether a model grades an assertion of any case."""
        return 1 in self._graded

    def uniform(self) -> bool:
        """Whether no case sets ``targets:`` or ``repeat:`` (so every case has as many cells as the next)."""
        n = len(self._ends)
        return self._targets.count(0) == n and self._repeat.count(0) == n

    def digest(self, i: int) -> bytes | None:
        """Case ``i``'s :func:`case_digest`, if the loader made every case's."""
        if len(self._digests) != DIGEST_SIZE * len(self._ends):
            return None
        return bytes(self._digests[DIGEST_SIZE * i : DIGEST_SIZE * (i + 1)])


class _Distinct(list[Any]):
    """A column's distinct values, each numbered once (a list with a dict beside it)."""

    def __init__(self, values: Sequence[Any] = ()) -> None:
        super().__init__(values)
        self._numbers = {v: i for i, v in enumerate(values)}

    def number(self, value: Any) -> int:
        n = self._numbers.get(value)
        if n is None:
            n = self._numbers[value] = len(self)
            self.append(value)
        return n


#: the fields of a case that make it what it is (not ``source``: a moved line is the same case)
_CONTENT = tuple(name for name in _FIELDS if name != "source")
_CONTENT_VALUES = attrgetter(*_CONTENT)
#: case fields added after the digests' version 2 (``turns``, ``tool_results``...): left out of a digest while None,
#: so a case that does not use them has the digest it had (``--resume`` of a run started before)
_LATER = ("turns", "tool_results", "simulate", "context")
_V2_FIELDS = len(_CONTENT) - len(_LATER)
_LATER_COUNT = len(_LATER)
#: the JSON of ``run.json``'s plan fingerprint and its case digests: ``json.dumps(value, sort_keys=True,
#: default=str, ensure_ascii=False)``, without building an encoder per call (changing it breaks ``--resume``)
FINGERPRINT_JSON = json.JSONEncoder(sort_keys=True, default=str, ensure_ascii=False)


#: bytes of a :func:`case_digest`
DIGEST_SIZE = 16


def case_digest(case: Case, redact: Callable[[Any], Any]) -> bytes:
    """BLAKE2b (16 bytes) of the ``repr`` of a case's content (every field but ``source``), secrets masked by ``redact`` first.

    ``run.json``'s plan fingerprint (version 2, :func:`evalx.execution.resume.plan_fingerprint`) is
    made of these, so ``--resume`` can tell that a case changed; a secret's value never goes into
    it, not even hashed. ``repr`` of the field values (str, numbers, lists and dicts as read) is
    exact and the same in every process, and a few times cheaper than sorted JSON
    (:func:`content_digest`, version 1): a dict whose keys were reordered counts as changed.
    """
    content = _CONTENT_VALUES(case)
    if content[_V2_FIELDS:].count(None) == _LATER_COUNT:  # the fields added since (turns...), left out while unset: all
        values = list(content[:_V2_FIELDS])
    else:  # those after the last one set
        values = list(content)
        while values[-1] is None:
            values.pop()
    text = repr(redact(values))  # a lone surrogate is escaped by repr: always UTF-8
    return hashlib.blake2b(text.encode(), digest_size=DIGEST_SIZE).digest()


def content_digest(case: Case, redact: Callable[[Any], Any]) -> bytes:
    """SHA-256 of a case's content (every field but ``source``) as sorted JSON, secrets masked by ``redact`` first.

    What version 1 of ``run.json``'s plan fingerprint is made of: a run started by evalx 0.x
    before the fingerprint's version 2 (:func:`case_digest`) still resumes.
    """
    fields = {k: v for k, v in zip(_CONTENT, _CONTENT_VALUES(case), strict=True) if v is not None or k not in _LATER}
    return hashlib.sha256(FINGERPRINT_JSON.encode(redact(fields)).encode()).digest()
