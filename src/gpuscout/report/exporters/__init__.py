"""Every file format gpuscout writes, behind one door: `get(name, subject)` (report/exporters/base.py).

json      stored runs (the stored shape, `results import` reads it back), comparisons
csv       stored runs (one flat row each), comparisons (one row per group)
markdown  comparisons (a table each), the report (PNG plots beside it)
html      the report (one self-contained file)
"""

from gpuscout.report.exporters import as_csv, as_html, as_json, as_markdown  # noqa: F401 (each registers itself)
from gpuscout.report.exporters.base import Exporter, Written, assets_folder, get, names, register

__all__ = ["Exporter", "Written", "assets_folder", "get", "names", "register"]
