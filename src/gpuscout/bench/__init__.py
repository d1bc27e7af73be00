"""`gpuscout bench`: the planned runs (gpuscout.measure.plans) measured each in a child, the
records stored, and repeats of one configuration summarised.

Measuring code never formats: this module returns plain records; ``report/`` renders them.
"""

from __future__ import annotations

from typing import NamedTuple

from gpuscout.analysis.stats import across_runs
from gpuscout.core.spec import RunSpec
from gpuscout.measure import engine
from gpuscout.measure.plans import BenchOptions, label
from gpuscout.record.run import RunRecord
from gpuscout.store import Store
from gpuscout.telemetry.nvml import Nvml


class BenchResult(NamedTuple):
    """What `bench` measured: its records, and each repeated configuration's summary."""

    records: list[RunRecord]
    summaries: list[dict]


def run_bench(
    specs: list[RunSpec], options: BenchOptions, store: Store, nvml: Nvml, progress: engine.Progress | None = None
) -> list[RunRecord]:
    session = engine.Session(nvml, options.measure)
    return engine.run([(spec, label(spec)) for spec in specs], session, store, progress, repeats=options.repeats)


def summarize_repeats(records: list[RunRecord]) -> list[dict]:
    """Across independent runs of the same configuration: olympic mean with 5+, else the mean."""
    groups: dict[tuple, list[RunRecord]] = {}
    for r in records:
        key = (
            r.workload,
            r.backend.value,
            r.precision.value,
            r.xla,
            r.batch_size,
            r.data.value,
            r.device,
            r.seq_len,
            r.devices,
        )
        groups.setdefault(key, []).append(r)
    out = []
    for key, runs in groups.items():
        medians = [r.throughput.median for r in runs if r.ok]
        if len(runs) < 2 or not medians:
            continue
        out.append(
            {
                "workload": key[0],
                "backend": key[1],
                "precision": key[2],
                "xla": key[3],
                "batch_size": key[4],
                "data": key[5],
                "device": key[6],
                "seq_len": key[7],
                "run_ids": [r.id for r in runs],
                "unit": runs[0].unit,
                "throughput": across_runs(medians),
            }
        )
    return out
