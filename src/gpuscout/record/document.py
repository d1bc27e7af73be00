"""The JSON document gpuscout writes records in: `--json`, `results export`, and a measurement the
store could not keep (store/sqlite.py saves it beside the store for `results import`)."""

from __future__ import annotations

import json

from gpuscout.core.versions import __version__
from gpuscout.record import StoredRecord
from gpuscout.record.run import SCHEMA_VERSION


def json_document(records: list[StoredRecord], **extra) -> str:
    """The records in the stored shape (their JSON Schema: `gpuscout results schema`), with the
    versions that wrote them."""
    runs = [json.loads(r.model_dump_json()) for r in records]
    return json.dumps(
        {"gpuscout_version": __version__, "schema_version": SCHEMA_VERSION, **extra, "runs": runs}, indent=2
    )
