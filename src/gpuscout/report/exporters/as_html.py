"""HTML: the report as one self-contained file (its plots inline SVG, its script and styles in the
page: it opens offline), written by report/html.py."""

from __future__ import annotations

from gpuscout.report.exporters.base import Exporter, Written, register


@register
class Html(Exporter):
    name = "html"
    title = "HTML"
    suffix = ".html"

    def report(self, doc, assets: str) -> Written:
        from gpuscout.report import html  # matplotlib: only where a report is drawn

        return Written(html.render(doc))
