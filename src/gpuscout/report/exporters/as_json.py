"""JSON: stored runs in the stored shape, with the versions that wrote them (`results import` reads
it back; its JSON Schema: `gpuscout results schema`), and comparisons as their fields."""

from __future__ import annotations

import json

from gpuscout.record.document import json_document
from gpuscout.report.exporters.base import Exporter, register


@register
class Json(Exporter):
    name = "json"
    title = "JSON"
    suffix = ".json"

    def runs(self, records) -> str:
        return json_document(records)

    def comparisons(self, comparisons) -> str:
        return json.dumps({"comparisons": [c.to_dict() for c in comparisons]}, indent=2) + "\n"
