"""Reports rendered from a run's result dicts: summary, text, JUnit XML."""

from __future__ import annotations

from ._junit import write_junit, xml_safe
from ._summary import SummaryBuilder, format_summary

__all__ = ["SummaryBuilder", "format_summary", "write_junit", "xml_safe"]
