"""The one shared room: leaves every layer uses on untrusted input (time limits, bounded regexes, sandboxed templates,
user code, redaction, documents with positions, the typed-record schema). It imports nothing else of evalx but errors, models and logs."""
