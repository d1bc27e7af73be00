"""More producers of the input: a PyDataset's worker threads, or a tf.data pipeline's maps and
interleaves run with num_parallel_calls=AUTOTUNE where the script left them sequential. Worker
processes are process_workers' (never Keras' own, which fork the training process)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

from gpuscout.core.units import counted
from gpuscout.record.watch import CallSite, WatchRecord
from gpuscout.tune.change import Change, not_waiting
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, original, site
from gpuscout.tune.source_edits import Edit, NotLocated, call_at, name_of, set_keywords


def waiting_pydataset(r: WatchRecord) -> str | None:
    """Why a change to a PyDataset does not apply, or None when the loop waits on one."""
    if main_fit(r).input_type != "PyDataset":
        return f"the input is {main_fit(r).input_type}, not a PyDataset"
    return not_waiting(r)


def wanted(r: WatchRecord) -> int:
    """The producers that keep up with the step: one more than the wait asks for, within the host's
    cores, and always one more than the PyDataset has."""
    main = main_fit(r)
    steady = r.steady
    fetch_s = sum(w.input_wait_s or 0 for w in steady) / max(1, sum(w.steps for w in steady))
    compute_s = max((r.step_time_s or 0.0) - fetch_s, 1e-6)
    have = main.input_workers or 1
    cores = r.env.cpu_count or 4
    # producers that keep up with the step, one more than the wait asks for, within the host's cores
    return max(have + 1, min(cores, math.ceil(fetch_s * have / compute_s) + 1))


def workers(r: WatchRecord) -> list[Change] | str:
    main = main_fit(r)
    if main.input_type == "tf.data":
        return parallel_calls(r)
    reason = waiting_pydataset(r)
    if reason:
        return reason
    count = wanted(r)
    return [
        Change(
            f"workers_{count}_threads",
            "workers",
            {"workers": count},
            f"super().__init__(workers={count}, use_multiprocessing=False, max_queue_size={2 * count})",
            f"{r.input_wait_share:.0%} of the time waiting for the next batch, "
            f"{counted(main.input_workers or 1, 'worker')}",
        )
    ]


def parallel_calls(r: WatchRecord) -> list[Change] | str:
    """A tf.data pipeline's maps and interleaves that the script left sequential, run with
    num_parallel_calls=tf.data.AUTOTUNE where it wrote them (child/tf_data.py): the guide's
    "parallelize the map transformation", its workers."""
    reason = not_waiting(r)
    if reason:
        return reason
    ops = main_fit(r).pipeline
    if not ops:
        return "the calls that built the tf.data pipeline were not seen (built in a library, or a record before this)"
    serial = [op for op in ops if op.op in ("map", "interleave") and op.parallel is False]
    if not serial:
        return "every map and interleave of the pipeline runs in parallel already (num_parallel_calls)"
    where = ", ".join(f"{op.op} at line {op.line}" for op in serial)
    return [
        Change(
            "parallel_calls",
            "workers",
            {"parallel_calls": True},
            f"dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE)   # {where}",
            f"{r.input_wait_share:.0%} of the time waiting for the next batch; {where} run one element at a time",
        )
    ]


def _parallel_call_edits(where: Where) -> FileEdits:
    """num_parallel_calls=tf.data.AUTOTUNE in each map and interleave the script left sequential,
    where the baseline's run saw it called (record.watch.PipelineOp), with TensorFlow by the name
    the file imports it as."""
    out: dict[Path, list[Edit]] = {}
    for op in main_fit(where.baseline).pipeline:
        if op.op not in ("map", "interleave") or op.parallel is not False:
            continue
        path, line = site({"op": CallSite(file=op.file, line=op.line)}, "op", where.root, f"called {op.op}")
        text = original(path, where.originals)
        value = f"{_tensorflow_name(text)}.data.AUTOTUNE"
        out.setdefault(path, []).extend(set_keywords(text, call_at(text, line, op.op), {"num_parallel_calls": value}))
    if not out:
        raise NotLocated("no sequential map or interleave of the script's own was seen")
    return list(out.items())


def _tensorflow_name(text: str) -> str:
    """The name a file imports TensorFlow by (`import tensorflow as tf`: tf), wherever it does."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "tensorflow":
                    return alias.asname or "tensorflow"
    raise NotLocated("the file does not import tensorflow by name: tf.data.AUTOTUNE cannot be written")


def _super_init(text: str, def_line: int) -> ast.Call:
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, ast.FunctionDef)
            and node.name == "__init__"
            and min([node.lineno, *(d.lineno for d in node.decorator_list)]) <= def_line <= node.lineno
        ):
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and name_of(call.func) == "__init__"
                    and isinstance(call.func, ast.Attribute)
                    and isinstance(call.func.value, ast.Call)
                    and name_of(call.func.value.func) == "super"
                ):
                    return call
            raise NotLocated(f"the PyDataset's __init__ (line {def_line}) calls no super().__init__(...)")
    raise NotLocated(f"no __init__ defined on line {def_line}")


class Workers(ChangeKind):
    name = "workers"
    listed = 30
    repeatable = True  # more threads where the input still waits
    rule = "a PyDataset that keeps the loop waiting (threads); a tf.data map left sequential"
    input_rank = 3

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return workers(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        settings = change.settings
        if settings.get("parallel_calls"):
            return _parallel_call_edits(where)
        path, line = site(where.sites, "input", where.root, "defined its PyDataset")
        text = original(path, where.originals)
        count = int(settings["workers"])
        keywords = {"workers": str(count), "use_multiprocessing": "False", "max_queue_size": str(2 * count)}
        return [(path, set_keywords(text, _super_init(text, line), keywords))]


KIND = Workers()
