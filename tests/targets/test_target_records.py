"""A target built from its typed record is the target built from its ``targets:`` entry.

``build_target`` takes either; the entry as written (``target.spec``) is what
cache keys and the templates' ``target`` are made from, so a record must give
back the entry it was built from, and both must key a cell's answer alike
(a changed key would miss every answer already in a user's cache).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from evalx.models import Case, Cell
from evalx.targets import RunContext, build_target
from evalx.targets.settings import TargetSettings
from evalx.targets.spec import target_spec, written_entry

ENTRIES: list[dict[str, Any]] = [
    {"id": "py", "type": "python", "callable": "agent:run", "tools": [{"name": "lookup"}], "vars": {"tone": "dry"}, "timeout_s": 5},
    {
        "id": "eng",
        "type": "engine",
        "url": "http://127.0.0.1:9",
        "api_key": "k-123",
        "headers": {"X-Agent-Version": "2"},
        "body": {"message": "{{ case.input }}", "mode": "{{ vars.tone }}"},
        "pricing": {"input_per_mtok": 1, "output_per_mtok": 2},
        "ray": {"actors": 2},
        "cache": False,
    },
    {
        "id": "llm",
        "type": "provider",
        "provider": "openai",
        "model": "m",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key": "k-456",
        "params": {"temperature": 0, "max_tokens": 9},
        "system": "be {{ vars.tone }}",
        "tools": [{"name": "lookup", "parameters": {"type": "object"}}],
        "rate_limit": {"rpm": 60},
        "pricing": {"input_per_mtok": 1, "output_per_mtok": 2, "cached_input_per_mtok": 0.5},
    },
]


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_a_record_gives_back_the_entry_it_was_built_from(entry: dict[str, Any]) -> None:
    record = target_spec(entry)
    assert written_entry(record) == entry
    assert written_entry(entry) is entry  # an entry as written is used as it is
    from_entry, from_record = build_target(entry, TargetSettings()), build_target(record, TargetSettings())
    assert type(from_entry) is type(from_record)
    assert from_entry.entry == from_record.entry == record
    assert json.dumps(from_record.spec, sort_keys=True) == json.dumps(entry, sort_keys=True)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["type"] != "python"], ids=lambda e: e["id"])
def test_a_target_built_from_its_record_keys_a_cell_as_the_entry_does(entry: dict[str, Any], tmp_path: Path) -> None:
    cell = Cell(index=0, target=entry["id"], dataset="d", case=Case(id="c1", input="hello", dataset="d"), repeat=0)

    async def key(spec: Any) -> str | None:
        run = RunContext(run_id="r", config_dir=tmp_path, vars={"tone": "dry"})
        target: Any = build_target(spec, TargetSettings())
        await target.start(run)
        try:
            found: str | None = target.cache_key(cell, run)
            return found
        finally:
            await target.aclose()

    from_entry = asyncio.run(key(entry))
    assert from_entry is not None
    assert asyncio.run(key(target_spec(entry))) == from_entry
