"""`evalx view` and the static history page: the runs folder as web pages (runs, case histories, comparisons, review marks)."""

from evalx.viewer.index import History, RunIndex, load_history
from evalx.viewer.pages import history_document

__all__ = ["History", "RunIndex", "history_document", "load_history"]
