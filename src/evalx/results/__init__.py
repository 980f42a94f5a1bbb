"""Results: the results format (``model``), the stored run (``results.jsonl``, ``summary.json``), aggregation,
statistics, comparison, gates and the run's outcome (``outcome``: summary.json assembled, the exit status decided).

Other subpackages import from the modules directly (``evalx.results.model``, ``evalx.results.outcome``...):
this package imports nothing, so the CLI's startup pays only for what it uses.
"""
