"""Reports rendered from a run's results: terminal text, JUnit XML, HTML, Markdown for CI."""

from __future__ import annotations

from evalx.reports.html import write_html
from evalx.reports.junit import write_junit, xml_safe
from evalx.reports.text import format_summary

__all__ = ["format_summary", "write_html", "write_junit", "xml_safe"]
