"""Reports rendered from a run's result dicts: summary, text, JUnit XML, HTML."""

from __future__ import annotations

from ._html import write_html
from ._junit import write_junit, xml_safe
from ._summary import SummaryBuilder, format_summary

__all__ = ["SummaryBuilder", "format_summary", "write_html", "write_junit", "xml_safe"]
