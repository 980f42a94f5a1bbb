"""The config as written, for the few readers that must see it so; every other reader uses ``Config.typed``.

What reads the written form, and why the typed records would not do:

- the config's hash and a plan's fingerprint (:mod:`evalx.execution.resume`): ``run.json`` of runs made
  before keeps them, and a resume or a rerun must compute the same digest again;
- the run's ``config.yaml``: the config as the user wrote it, redacted;
- the datasets and target ids of a config with errors in other sections (``evalx validate`` goes on to
  check its datasets, and :attr:`Config.typed` is the records of a whole valid config);
- a ``--matrix`` run's variants: :mod:`evalx.config.matrix` counts and expands the section as written, and
  a variant's entry is its target's entry with the combination applied;
- the targets a run builds (the run's own, the judge's, the simulated users'): a target's cache key and
  its templates' ``target`` are made from its entry as written (:func:`evalx.targets.build_target`), as are
  the assertions and the ``judge:`` section the checks read (:func:`evalx.assertions.evaluate_case`).

Each value is the JSON the schema accepted (after ``${VAR}`` interpolation); nothing here reads a key of it.
"""

from __future__ import annotations

from typing import Protocol

from evalx.common.documents import Loaded
from evalx.common.json_types import JSONObject, as_array, as_object


class Config(Protocol):
    """A loaded config (:class:`evalx.config.loader.Config`): the document it was read from."""

    @property
    def loaded(self) -> Loaded: ...


__all__ = ["dataset_entries", "document", "global_asserts", "judge_section", "matrix_section", "target_entries"]


def document(config: Config) -> JSONObject:
    """The whole config."""
    return as_object(config.loaded.data)


def target_entries(config: Config) -> dict[str, JSONObject]:
    """Each ``targets:`` entry by its id, in order."""
    entries = (as_object(entry) for entry in as_array(document(config).get("targets")))
    return {str(entry.get("id")): entry for entry in entries}


def dataset_entries(config: Config) -> list[JSONObject]:
    """The ``datasets:`` entries, in order (``evalx validate`` reads them while other sections have errors)."""
    return [as_object(entry) for entry in as_array(document(config).get("datasets"))]


def global_asserts(config: Config) -> list[JSONObject]:
    """The config's ``assert:`` entries."""
    return [as_object(entry) for entry in as_array(document(config).get("assert"))]


def judge_section(config: Config) -> JSONObject:
    """The ``judge:`` section (empty when there is none)."""
    return dict(as_object(document(config).get("judge")))


def matrix_section(config: Config) -> JSONObject | None:
    """The ``matrix:`` section (None when there is none)."""
    section = document(config).get("matrix")
    return section if isinstance(section, dict) else None
