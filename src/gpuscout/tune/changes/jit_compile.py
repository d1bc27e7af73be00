"""XLA for a step compiled without it; and a step left op by op in Keras' debugging setting
(run_eagerly=True) compiled at all, with XLA where Keras would use it."""

from __future__ import annotations

import ast

from gpuscout.record.watch import WatchRecord
from gpuscout.tune.change import Change
from gpuscout.tune.changes.base import ChangeKind, FileEdits, Where, main_fit, original, site
from gpuscout.tune.source_edits import Edit, at, call_at, offsets, order, set_keywords


def jit(r: WatchRecord) -> list[Change] | str:
    main = main_fit(r)
    if main.run_eagerly:  # the debugging setting that compiles nothing, on either backend
        return graph(r)
    if main.jit_compile:
        return "the step is XLA-compiled already"
    if main.backend == "tensorflow" and r.gpu is None:
        return (
            "Keras turns XLA off on a CPU-only TensorFlow, where it loses (0.10x of fit, docs/benchmarks.md); "
            "the script runs what Keras chose"
        )
    if main.backend == "tensorflow" and main.strategy:
        return f"Keras does not XLA-compile under {main.strategy}"
    return [
        Change(
            "jit_compile",
            "jit_compile",
            {"jit_compile": True},
            "model.compile(..., jit_compile=True)",
            f"the step runs without XLA on {main.backend} (jit_compile=False)",
        )
    ]


def graph(r: WatchRecord) -> list[Change]:
    """A model left with run_eagerly=True: every step runs op by op in Python (Keras' debugging
    mode). The step compiled again, with XLA where Keras would use it (jax; TensorFlow on a GPU
    outside tf.distribute), else as TensorFlow's graph: the same pace-multiplying change as
    jit_compile, measured first (ChangeKind.paces)."""
    main = main_fit(r)
    xla = main.backend == "jax" or (r.gpu is not None and not main.strategy)
    settings = {"run_eagerly": False, **({"jit_compile": True} if xla else {})}
    line = (
        "model.compile(..., run_eagerly=False"
        + (", jit_compile=True)" if xla else ")")
        + "   # and no `model.run_eagerly = True`"
    )
    return [
        Change(
            "jit_compile" if xla else "run_eagerly_false",
            "jit_compile",
            settings,
            line,
            f"the step runs eagerly (run_eagerly=True): op by op in Python, on {main.backend}",
        )
    ]


def eager_assignments(text: str) -> list[Edit]:
    """`model.run_eagerly = True` (a debugging line) made False."""
    starts = offsets(text)
    return [
        (
            at(text, starts, n.value.lineno, n.value.col_offset),
            at(text, starts, n.value.end_lineno, n.value.end_col_offset),
            "False",
            next(order),
        )
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "run_eagerly" for t in n.targets)
    ]


class JitCompile(ChangeKind):
    name = "jit_compile"
    listed = 0
    paces = True
    work_rank = 0
    rule = "the step runs without XLA (on tensorflow: only on a GPU, where Keras itself would compile)"

    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | str:
        return jit(baseline)

    def edits(self, change: Change, where: Where) -> FileEdits:
        """XLA, and (a model left in debugging settings) no eager step: compile's keywords, and any
        `model.run_eagerly = True` made False."""
        settings = change.settings
        path, line = site(where.sites, "compile", where.root, "compiled the model")
        text = original(path, where.originals)
        values = {
            **({"run_eagerly": "False"} if settings.get("run_eagerly") is False else {}),
            **({"jit_compile": "True"} if settings.get("jit_compile") else {}),
        }
        edits = set_keywords(text, call_at(text, line, "compile"), values)
        if settings.get("run_eagerly") is False:
            edits += eager_assignments(text)
        return [(path, edits)]


KIND = JitCompile()
