"""Split a plan into shards (``evalx run --shard I/N``): whole cases dealt to N shards, the same way on every machine.

A shard is a unit of whole cases: every cell of a case (each target, each
repeat) goes to the same shard, so a check across a case's cells
(``pairwise``) runs inside one shard. Which shard a case goes to depends only
on the plan: each case is keyed by a BLAKE2b digest of its dataset and id
(never Python's ``hash()``, which changes from one process to the next), the
cases are sorted by their number of cells (most first), then by that key, and
each in turn goes to the shard holding the fewest cells so far (the lowest
shard number on a tie). When every case has the same number of cells this
deals them round-robin, so shard sizes differ by at most one case; otherwise
no shard exceeds another by more than the largest case's cells.
"""

from __future__ import annotations

import hashlib
import heapq
import re
from collections.abc import Sequence

from evalx.errors import ShardError

__all__ = ["ShardError", "case_key", "deal", "parse_shard", "shard_label"]


_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` (1-based ``I``, ``1 <= I <= N``) as ``(I, N)``; anything else is a one-line :class:`ShardError`."""
    match = _SHARD.fullmatch(text)
    if match is None:
        raise ShardError(f"--shard {text}: expected I/N, the shard's number and the number of shards (e.g. --shard 1/3)")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 1 <= index <= count:
        raise ShardError(f"--shard {text}: the shard's number must be from 1 to the number of shards (e.g. --shard 1/{max(count, 3)})")
    return index, count


def shard_label(index: int, count: int) -> str:
    return f"{index}/{count}"


def case_key(dataset: str, case_id: str) -> bytes:
    """The stable key a case is dealt by: a digest of its dataset and id, the same on every machine and Python."""
    text = f"{dataset}\x1f{case_id}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=8).digest()


def deal(keys: Sequence[bytes], cells: Sequence[int], count: int) -> list[int]:
    """The shard (0-based) of each case, given its key and cells: most cells first, then by key, to the emptiest shard."""
    order = sorted(range(len(keys)), key=keys.__getitem__)
    owner = [0] * len(keys)
    if len(set(cells)) <= 1:  # every case the same size: the emptiest shard is the next one round the table
        for rank, k in enumerate(order):
            owner[k] = rank % count
        return owner
    order.sort(key=cells.__getitem__, reverse=True)  # stable: equal sizes stay in key order
    loads = [(0, s) for s in range(count)]  # a heap of (cells so far, shard)
    for k in order:
        load, s = loads[0]
        owner[k] = s
        heapq.heapreplace(loads, (load + cells[k], s))
    return owner
