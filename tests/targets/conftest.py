"""Fixtures of the provider contract tests (tests/targets/test_provider_contracts_*.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from contract_server import ContractServer


@pytest.fixture(scope="module")
def server() -> Iterator[ContractServer]:
    """A scripted fake provider on 127.0.0.1 for one module's contract tests (``contract_server.py``)."""
    s = ContractServer().start()
    yield s
    s.stop()
