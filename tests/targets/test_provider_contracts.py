"""Every shipped provider definition has a contract test (tests/targets/provider_contracts.py says which)."""

from __future__ import annotations

from pathlib import Path

from provider_contracts import CONTRACTS

from evalx.targets.definitions import available

REPO = Path(__file__).resolve().parents[2]


def test_every_shipped_definition_has_a_contract_test() -> None:
    shipped = sorted(name for name, entry in available().items() if entry.shipped)
    assert len(shipped) >= 12
    missing = [name for name in shipped if name not in CONTRACTS]
    assert not missing, f"shipped definitions without a contract test (add them to tests/targets/provider_contracts.py): {missing}"
    for name in shipped:
        test_file = REPO / CONTRACTS[name]
        assert test_file.is_file(), f"{name}: {CONTRACTS[name]} does not exist"
        assert name in test_file.read_text(encoding="utf-8"), f"{name}: {CONTRACTS[name]} does not mention it"


def test_the_registry_names_no_definition_that_is_not_shipped() -> None:
    shipped = {name for name, entry in available().items() if entry.shipped}
    assert set(CONTRACTS) <= shipped, sorted(set(CONTRACTS) - shipped)


def test_every_shipped_file_is_valid_against_the_published_schema_as_written() -> None:
    """What an editor checks (the yaml-language-server line): a file with extends: is a part of a definition."""
    import json

    import yaml
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(json.loads((REPO / "schemas/provider.schema.json").read_text(encoding="utf-8")))
    for name, entry in available().items():
        if entry.shipped:
            data = yaml.safe_load(entry.path.read_text(encoding="utf-8"))
            assert [e.message for e in validator.iter_errors(data)] == [], name
    assert [e.message for e in validator.iter_errors({"name": "x", "base_url": "http://x"})]  # without extends: all of it
