"""Results: the stored run (``results.jsonl``, ``summary.json``), aggregation, statistics, comparison and gates."""
