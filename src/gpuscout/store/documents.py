"""Reading a results document (`results export`'s JSON) back into typed records: `results import` and
`compare BASE.json NEW.json` read through it, each record validated before anything uses it."""

from __future__ import annotations

import json

from pydantic import ValidationError

from gpuscout.core import inputs
from gpuscout.core.errors import UsageError
from gpuscout.core.outputs.marks import RESCUE_KEY
from gpuscout.record import STORED, StoredRecord
from gpuscout.record.migrate import MigrationError, upgrade
from gpuscout.record.run import SCHEMA_VERSION, RunRecord
from gpuscout.record.watch import WatchRecord
from gpuscout.store.rows import problem, shown


def parse_document(text: str, origin: str) -> list[StoredRecord]:
    """The records of a gpuscout JSON document (as `results export` writes it, from this or an
    older schema), each validated before anything is stored: UsageError names the first record
    and field that is wrong."""
    try:
        # json's C parser alone first: its shape tells a file that is no export in a second, where the
        # checking parse below took 60 s over 120 MiB of it (issue 87, item 10)
        shape = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{origin} is not JSON ({exc.msg}, line {exc.lineno}): not a gpuscout results file") from None
    except (RecursionError, ValueError):  # nested past Python's limit, 5,000 digits: the checking parse words it
        shape = None
    if shape is not None and not (isinstance(shape, dict) and "runs" in shape and "schema_version" in shape):
        doc = shape
    else:
        doc = inputs.loads_json(text, origin, "a gpuscout results file", readings=True)
    if not isinstance(doc, dict) or "runs" not in doc or "schema_version" not in doc:
        raise UsageError(
            f"{origin} is not a gpuscout results file (no 'runs' and 'schema_version'): "
            "write one with `gpuscout results export`"
        )
    version = doc["schema_version"]
    if type(version) is not int or version < 1:
        raise UsageError(
            f"{origin}: schema_version must be a whole number, got {version!r}: "
            "not a file `gpuscout results export` wrote"
        )
    if version > SCHEMA_VERSION:
        raise UsageError(
            f"{origin} has results schema {version}, newer than this gpuscout's "
            f"({SCHEMA_VERSION}): upgrade gpuscout to import it"
        )
    stray = next((key for key in doc if key not in DOCUMENT_KEYS), None) if version == SCHEMA_VERSION else None
    if stray is not None:  # said before any record is read, its value cut (issue 87: -Infinity was accepted)
        raise UsageError(
            f"{origin}: {stray!r} is no key of a gpuscout results file (got {shown(doc[stray])!r}): "
            "not a file gpuscout wrote, nothing was imported"
        )
    runs = doc["runs"]
    if not isinstance(runs, list):
        raise UsageError(f"{origin}: 'runs' must be a list of records")
    records = []
    for index, raw in enumerate(runs):
        name = f"run #{index + 1}" + (
            f" ({raw['id']})" if isinstance(raw, dict) and isinstance(raw.get("id"), str) else ""
        )
        if not isinstance(raw, dict):
            raise UsageError(f"{origin}: {name} is not a record (a JSON object): nothing was imported")
        unknown = _unknown_field(raw, version)
        if unknown:  # said before the record's values are validated (a large one takes seconds)
            raise UsageError(
                f"{origin}: {name}: {unknown}: Extra inputs are not permitted (got {shown(raw[unknown])!r}): "
                "nothing was imported"
            )
        try:
            records.append(STORED.validate_python(upgrade(raw, version)))
        except ValidationError as exc:
            raise UsageError(f"{origin}: {name}: {problem(exc)}: nothing was imported") from None
        except (MigrationError, TypeError, AttributeError, KeyError) as exc:
            raise UsageError(
                f"{origin}: {name} cannot be read as schema {version} ({exc}): nothing was imported"
            ) from None
    ids = [r.id for r in records]
    if len(ids) != len(set(ids)):
        raise UsageError(f"{origin} holds the same run id twice: nothing was imported")
    return records


# What a results document holds beside its runs: the versions (record/document.json_document), a
# bench's summaries and an inference run's latency verdicts (their --json), a rescued store's origin
DOCUMENT_KEYS = frozenset(
    {"gpuscout_version", "schema_version", "runs", "summaries", "latency_targets", RESCUE_KEY, "reason"}
)
# A record's fields by its kind: what a top-level key must be one of
_FIELDS = {"benchmark": set(RunRecord.model_fields), "watch": set(WatchRecord.model_fields)}


def _unknown_field(raw: dict, version: int) -> str | None:
    """A top-level key of a record of this schema that its kind has no field for (an older schema's
    keys are the migration's to read)."""
    fields = _FIELDS.get(raw.get("kind", "benchmark"))
    if version != SCHEMA_VERSION or fields is None:
        return None
    return next((key for key in raw if key not in fields), None)
