"""The verb `compare` (named `comparison` here: `gpuscout.compare` is the notebook's call of it):
stored runs, or two export files side against side, grouped by the one field that differs, with
ratios and intervals (analysis/compare.py); with a threshold, a CI gate (analysis/gate.py).

The command reads its options into a `CompareRequest` (checked before the store is opened), calls
`compare` once and emits the `Compared` it returns: the comparisons in the format asked, or the
gate's lines and its exit status, with what was left out said beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuscout.analysis.compare import FIELDS, Comparison
from gpuscout.analysis.compare import compare as compare_runs
from gpuscout.analysis.device_causes import precision_of
from gpuscout.analysis.gate import GateResult, gate
from gpuscout.core import inputs
from gpuscout.core.errors import UsageError
from gpuscout.record import StoredRecord
from gpuscout.record.watch import WatchRecord
from gpuscout.store import Store
from gpuscout.store.documents import parse_document

# What fills an empty store
NO_RUNS_YET = "run `gpuscout bench` or `gpuscout watch -- python train.py`, or `gpuscout results import FILE`"
# What one side's file may hold: as `results import` reads (cli/results.py MAX_IMPORT_BYTES)
MAX_SIDE_BYTES = 128 * inputs.MiB


@dataclass(frozen=True)
class Filters:
    """Which stored runs a comparison or report covers: each a substring of the run's value."""

    workloads: tuple[str, ...] = ()
    gpu: str | None = None
    precision: str | None = None
    backend: str | None = None


@dataclass(frozen=True)
class CompareRequest:
    """What to compare, checked: run ids (or two export files), the field, the baseline, the
    filters, the gate's threshold and the output format."""

    names: tuple[str, ...] = ()  # run ids or prefixes, or two export files
    by: str | None = None
    baseline: str | None = None
    filters: Filters = field(default_factory=Filters)
    fail_slower_pct: float | None = None
    fmt: str = "table"  # table, or an exporter's that writes comparisons (checked by the command)
    store_path: Path | None = None

    def __post_init__(self) -> None:
        if self.fail_slower_pct is not None:
            # 0: any slowdown the runs show fails (docs/ci.md: a PCT of 0-100); 100 would pass a run of 0 samples/s
            if not 0 <= self.fail_slower_pct < 100:
                raise UsageError(
                    f"--fail-slower takes a percentage from 0 up to 100 (not 100), got {self.fail_slower_pct:g}"
                )
            if self.fmt not in ("table", "json"):
                raise UsageError("--fail-slower says its verdict as text, or as JSON with --json")
        if self.files and (self.by not in (None, "side") or self.baseline is not None):
            raise UsageError("two export files are compared side against side: leave out --by and --baseline")

    @property
    def files(self) -> list[str]:
        """The two export files named, where two files are named (a run id is never a file here)."""
        paths = [Path(n) for n in self.names]
        if len(paths) == 2 and all(p.suffix == ".json" and p.is_file() for p in paths):
            return list(self.names)
        if any(p.suffix == ".json" and p.is_file() for p in paths):
            raise UsageError("name two export files (BASE.json NEW.json) or run ids, not both")
        return []


@dataclass
class Compared:
    """A comparison's answer: the comparisons, or the gate read from them; `said`: what the reader
    is told beside them, on stderr (damaged runs left out, nothing to compare)."""

    comparisons: list[Comparison]
    gate: GateResult | None = None
    said: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return self.gate.exit_code if self.gate is not None else 0


def compare(request: CompareRequest) -> Compared:
    """The runs the request names, compared (and gated, with a threshold)."""
    said: list[str] = []
    by, baseline, sides = request.by, request.baseline, None
    files = request.files
    if files:  # `compare BASE.json NEW.json`: each file's runs one side, the first the baseline
        records, sides = _read_sides(files)
        by, baseline = "side", files[0]
    else:
        by = by or ("run" if request.names else "gpu")
        with Store(request.store_path, readonly=True) as store:
            if not request.names and request.fail_slower_pct is None and not store.count():
                # a new store: nothing to compare yet is an answer too (a CI gate's empty store is not)
                return Compared([], said=[f"note: {store.path} holds no runs yet: {NO_RUNS_YET}"])
            records = select(store, list(request.names), request.filters)
            said += damaged(store)
    if request.names and by == "run" and baseline is None:
        baseline = records[0].id  # `compare BASE NEW`: the first run named is the baseline, whenever it ran
    comparisons = compare_runs(records, by, baseline, sides)
    if request.fail_slower_pct is not None:
        return Compared(comparisons, gate(comparisons, records, request.fail_slower_pct), said)
    if not comparisons:  # an answer, not a mistake: said, with an empty result in the format asked (exit 0)
        said.append(
            f"note: nothing to compare by {by}: the selected runs ({len(records)}) do not include two groups that "
            f"differ in {by} alone; try another --by or `gpuscout results list`"
        )
    return Compared(comparisons, said=said)


def select(store: Store, run_ids: list[str] | None, filters: Filters) -> list[StoredRecord]:
    """The runs a report or comparison covers; filters that match nothing say what exists."""
    if run_ids:
        return [store.get(run_id) for run_id in run_ids]
    records: list[StoredRecord] = store.list()
    if not records:
        raise UsageError(f"{store.path} holds no runs: {NO_RUNS_YET}")
    for name, wanted in (
        ("workload", filters.workloads),
        ("gpu", (filters.gpu,) if filters.gpu else ()),
        ("precision", (filters.precision,) if filters.precision else ()),
        ("backend", (filters.backend,) if filters.backend else ()),
    ):
        if not wanted:
            continue
        chosen = [r for r in records if any(w.lower() in _value(r, name).lower() for w in wanted)]
        if not chosen:
            present = sorted({_value(r, name) for r in records})
            raise UsageError(f"no stored run matches {name} {', '.join(wanted)}: the store has {', '.join(present)}")
        records = chosen
    return records


def damaged(store: Store) -> list[str]:
    """One line per stored record a read left out because it does not validate."""
    return [
        f"warning: run {run_id} in {store.path} is damaged and was left out ({why})"
        for run_id, why in store.unreadable.items()
    ]


def _value(r: StoredRecord, name: str) -> str:
    """A record's workload, gpu, precision or backend as text, for filtering: a watched script's
    precision and backend are its main fit's."""
    if name == "workload":
        return r.workload
    if isinstance(r, WatchRecord):
        if name == "gpu":
            return str(r.gpu_label)
        main = r.main
        if main is None:
            return ""
        return precision_of(main.precision_policy).value if name == "precision" else main.backend or ""
    return str(FIELDS[name](r))


def _read_sides(files: list[str]) -> tuple[list[StoredRecord], dict[str, str]]:
    """Each file's runs (`results export`'s document, validated as `results import` does), and
    each run's side: the file it came from."""
    records: list[StoredRecord] = []
    sides: dict[str, str] = {}
    for name in files:
        text = inputs.read_text(
            Path(name), "a gpuscout results file (`gpuscout results export` writes one)", MAX_SIDE_BYTES
        )
        for record in parse_document(text, name):
            if record.id in sides:
                raise UsageError(f"run {record.id} is in both {sides[record.id]} and {name}: a run is one side's")
            sides[record.id] = name
            records.append(record)
    return records, sides
