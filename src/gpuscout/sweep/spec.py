"""The sweep file (YAML), validated before anything starts, and its expansion into trials.

    name: lr-wd
    command: python train.py --lr {lr} --wd {weight_decay} --aug {augmentation}
    reports: [val_accuracy, val_loss]      # from Keras fit's logs, JSON lines, or gpuscout.sweep.report
    metric: {name: val_accuracy, direction: max}
    space:
      lr: {loguniform: [1.0e-4, 1.0e-1]}
      weight_decay: [0.0, 1.0e-4, 5.0e-4]
      augmentation: {choice: [none, flip]}
    strategy: {kind: random, trials: 16, seed: 0}   # or: grid, or {kind: tpe, trials: 24, seed: 0}
    early_stop: {kind: successive_halving, grace_epochs: 1, reduction_factor: 3}   # or {kind: median, grace_epochs: 2}
    timeout_s: 3600
    retries: 1
    trials_per_gpu: 1
    max_consecutive_failures: 5
    compilation_cache: true          # the trials of the store's sweeps share jax's compiled programs
    warm_start: true                 # `python SCRIPT` trials fork from one interpreter that imported Keras once

or, instead of `command`, `workload: resnet18_cifar` with a space over `gpuscout bench` options
(batch_size, precision, seq_len, data, pipeline_cost, backend, and the protocol's), the others
fixed under `bench:` ({backend: jax, windows: 3}), and a metric from its record (samples_per_s,
mfu, ...). Each such trial is a benchmark run measured by the engine, stored like any.

A command is a template of Python's str.format: `{name}` is a parameter (`{lr:.2e}` formatted),
`{{` and `}}` are literal braces (so a shell's `${HOME}` is written `${{HOME}}`). Each value is
quoted as one word. A command with shell syntax (pipes, `&&`, redirections, `$VAR`, `VAR=x`
first) runs with /bin/sh -c; `shell: true` or `false` says so explicitly.
"""

from __future__ import annotations

import hashlib
import math
import re
import string
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuscout.core import durations, inputs
from gpuscout.core.errors import UsageError

# What a workload sweep may vary or fix: `gpuscout bench` options, by their names in BenchOptions
# (and the protocol's, spec.Protocol).
WORKLOAD_PARAMS = {
    "batch_size",
    "precision",
    "seq_len",
    "data",
    "pipeline_cost",
    "backend",
    "xla",
    "seed",
    "warmup_steps",
    "windows",
    "window_steps",
    "window_seconds",
}
WORKLOAD_METRICS = {
    "samples_per_s",
    "throughput",
    "mfu",
    "achieved_tflops",
    "step_time_s",
    "epoch_time_s",
    "peak_memory_bytes",
    "compile_s",
    "loss",
}


SWEEP_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


# Every model of a sweep file is strict: YAML's `true` is not a count of retries, `"3"` not a
# number, `1.0` not a whole one (pydantic's lax mode would take each silently).
SWEEP_MODEL = ConfigDict(extra="forbid", strict=True)


class Metric(BaseModel):
    model_config = SWEEP_MODEL
    name: str
    direction: Literal["max", "min"] = "max"


def number(value) -> float | None:
    """A reported value as a number the sweep can rank and prune by, or None: a trial reports what
    its training made (a NaN loss, a custom metric's text or vector), and only a number ranks."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def score(value) -> float | None:
    """A reported value that ranks: a finite number (a diverged trial's NaN never is the best)."""
    found = number(value)
    return found if found is not None and math.isfinite(found) else None


class Strategy(BaseModel):
    model_config = SWEEP_MODEL
    # tpe: Optuna's Tree-structured Parzen Estimator, each trial proposed from the results so far
    kind: Literal["grid", "random", "tpe"] = "grid"
    trials: int | None = Field(default=None, ge=1, le=100_000)  # random and tpe
    seed: int = Field(default=0, ge=0, le=2**32 - 1)  # numpy's and Optuna's seeds are unsigned 32-bit

    @model_validator(mode="after")
    def _random_needs_a_count(self) -> Strategy:
        if self.kind in ("random", "tpe") and self.trials is None:
            raise ValueError(f"a {self.kind} search needs `trials: N`")
        return self


class EarlyStop(BaseModel):
    """Stopping hopeless trials at an epoch's end, by Optuna's pruners (sweep/search.py) on the
    sweep's metric as fit's logs report it each epoch."""

    model_config = SWEEP_MODEL
    # gpuscout's rules (sweep/pruning.py), each re-judged as peers arrive, on the best of the last
    # smooth_epochs: successive_halving; hyperband (brackets of it, each from a later first rung);
    # median; patience (a trial's own best not bettered in patience_epochs). Optuna's own pruners
    # as Optuna runs them, to compare with: optuna_hyperband, optuna_median
    kind: Literal["successive_halving", "hyperband", "median", "patience", "optuna_hyperband", "optuna_median"]
    grace_epochs: int = Field(default=1, ge=1)  # no trial is stopped before this many epochs
    reduction_factor: int = Field(default=3, ge=2)  # halving, hyperband: 1 in this many goes on at each rung
    smooth_epochs: int = Field(default=3, ge=1, le=1000)  # judged on the best of these (gpuscout's rules)
    patience_epochs: int = Field(default=10, ge=1, le=100_000)  # patience: epochs without a better value
    # hyperband: bracket b judges from grace_epochs x reduction_factor^b on (1: successive halving);
    # Hyperband's own count, log_factor(epochs / grace) + 1, is 5 at 300 epochs from a grace of 3
    brackets: int = Field(default=3, ge=1, le=10)

    @model_validator(mode="after")
    def _settings_its_rule_reads(self) -> EarlyStop:
        # a setting the rule never reads would change nothing, silently: said, as a typo would be
        unread = sorted(self.model_fields_set - READS[self.kind] - {"kind"})
        if unread:
            users = sorted(k for k, reads in READS.items() if unread[0] in reads)
            raise ValueError(
                f"kind {self.kind} does not use {', '.join(unread)} ({unread[0]} is for {' and '.join(users)}): "
                "remove it, or pick the rule that uses it"
            )
        return self


# The settings each early_stop rule reads (sweep/pruning.py; Optuna's pruners in sweep/search.py)
READS = {
    "successive_halving": {"grace_epochs", "reduction_factor", "smooth_epochs"},
    "hyperband": {"grace_epochs", "reduction_factor", "smooth_epochs", "brackets"},
    "median": {"grace_epochs", "smooth_epochs"},
    "patience": {"grace_epochs", "patience_epochs"},
    "optuna_hyperband": {"grace_epochs", "reduction_factor"},
    "optuna_median": {"grace_epochs"},
}


class SweepFile(BaseModel):
    model_config = SWEEP_MODEL
    # The name is a folder of the sweep's logs (sweeps/NAME beside the store): one path component
    # that starts with a letter, digit or _, so `..`, `.` and hidden names never leave that folder.
    name: str
    command: str | None = None
    shell: bool | None = None  # None: when the command uses shell syntax
    workload: str | None = None
    reports: list[str] = Field(default_factory=list)
    metric: Metric
    space: dict[str, Any] = Field(min_length=1)
    strategy: Strategy = Strategy()
    early_stop: EarlyStop | None = None
    # a trial's time limit: a duration (30m, 1.5h: core/durations.py) or a bare number of seconds; a year at
    # most: past it no timeout means anything
    timeout_s: float = Field(default=3600.0, gt=0, le=365 * 86400)
    retries: int = Field(default=0, ge=0, le=100)
    trials_per_gpu: int = Field(default=1, ge=1, le=64)
    max_consecutive_failures: int = Field(default=5, ge=1, le=1_000_000)
    bench: dict[str, Any] = Field(default_factory=dict)  # workload sweeps: `gpuscout bench` options held fixed
    # One persistent XLA compilation cache for the trials of every sweep of a store (jax's;
    # sweeps/.xla-cache beside the store, sweep/resume_plan.cache_folder): what one trial compiled
    # the next loads, in this sweep, after --resume and in the next sweep. False: every trial
    # compiles afresh, so a workload trial's compile_s is a cold compile.
    compilation_cache: bool = True
    # A command `python SCRIPT ...` forked from one interpreter of the sweep's that has imported
    # the script's frameworks (executor/warm.py), instead of a new interpreter importing them again:
    # seconds a trial, which a pruned trial paid before it trained. False: each its own interpreter.
    warm_start: bool = True

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        """`timeout_s: 30m` as 1800 seconds, the grammar of every duration option; a number stays one."""
        if isinstance(value, str):
            try:
                return durations.seconds(value, "timeout_s")
            except UsageError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("name")
    @classmethod
    def _one_folder(cls, name: str) -> str:
        if not SWEEP_NAME.fullmatch(name):
            raise ValueError(
                f"{name[:40]!r} cannot name a sweep: its logs go in a folder of that name, so it is up to "
                "100 letters, digits, '_', '.' or '-', starting with a letter, digit or '_' (not '..')"
            )
        return name

    @field_validator("space")
    @classmethod
    def _dimensions(cls, space: dict) -> dict:
        for name, dim in space.items():
            if not name.isidentifier():
                raise ValueError(f"parameter name {name!r} must be an identifier")
            values_or_range(name, dim)
        return space

    @model_validator(mode="after")
    def _one_target(self) -> SweepFile:
        if (self.command is None) == (self.workload is None):
            raise ValueError("give exactly one of `command` (your script) and `workload` (a gpuscout workload)")
        return self


def values_or_range(name: str, dim) -> tuple[str, Any]:
    """('values', [...]) for lists and choices, or (kind, (lo, hi)) for ranges."""
    if isinstance(dim, list):
        if not dim:
            raise ValueError(f"space.{name} is an empty list")
        return "values", dim
    if isinstance(dim, dict) and len(dim) == 1:
        ((kind, arg),) = dim.items()
        if kind == "choice":
            if not isinstance(arg, list) or not arg:
                raise ValueError(f"space.{name}.choice must be a non-empty list")
            return "values", arg
        if kind in ("uniform", "loguniform", "int"):
            if not (
                isinstance(arg, list) and len(arg) == 2 and all(number(v) is not None for v in arg) and arg[0] < arg[1]
            ):
                raise ValueError(f"space.{name}.{kind} must be [low, high] with low < high")
            if kind == "loguniform" and arg[0] <= 0:
                raise ValueError(f"space.{name}.loguniform needs a positive low bound")
            return kind, tuple(arg)
    if isinstance(dim, (int, float, str, bool)):
        return "values", [dim]
    raise ValueError(f"space.{name}: give a list, or one of choice / uniform / loguniform / int")


def _line_of(text: str, loc: tuple) -> int | None:
    """The line of a (nested) key in the YAML text, from the composed node tree."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in loc:
        if not isinstance(node, yaml.MappingNode):
            break
        for key, value in node.value:
            if key.value == str(part):
                line, node = key.start_mark.line + 1, value
                break
        else:
            break
    return line


# A sweep file is a page of YAML; a megabyte is thousands of lines of it.
MAX_SWEEP_FILE_BYTES = inputs.MiB


def load(path: Path) -> tuple[SweepFile, str]:
    """The validated sweep file and a hash of its text; UsageError names the field and line."""
    what = "a sweep file (YAML text, see `gpuscout sweep --help`)"
    text = inputs.read_text(path, what, MAX_SWEEP_FILE_BYTES)
    try:
        raw = inputs.load_yaml(text, str(path), what)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        said = problem if "given twice" in problem else f"not valid YAML ({problem})"
        raise UsageError(f"{path}{where}: {said}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: a sweep file is a mapping (name:, command: or workload:, space:, metric:)")
    if "name" not in raw:  # the file's own name names the sweep (its trials, logs and --resume)
        raw["name"] = re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem).strip("-.")[:100] or "sweep"
    if "bench_args" in raw:
        raise UsageError(
            f"{path} line {_line_of(text, ('bench_args',))}: bench_args is now `bench:`, a mapping of "
            "`gpuscout bench` options, e.g. bench: {backend: jax, windows: 3}"
        )
    try:
        sweep = SweepFile(**raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        named = re.search(r"space\.(\w+)", first["msg"])  # a dimension's own error: point at its line
        line = _line_of(text, ("space", named.group(1)) if named and loc == ("space",) else loc[:2])
        field = ".".join(str(p) for p in loc) or "file"
        raise UsageError(
            f"{path}{f' line {line}' if line else ''}: {field}: {first['msg'].removeprefix('Value error, ')}"
        ) from None
    _check_names(sweep, path, text)
    return sweep, hashlib.sha256(text.encode()).hexdigest()[:16]


def _check_names(sweep: SweepFile, path: Path, text: str) -> None:
    params = set(sweep.space)
    if sweep.command is not None:
        line = _line_of(text, ("command",))
        try:
            used = {field for _, field, _, _ in string.Formatter().parse(sweep.command) if field}
        except ValueError as exc:  # an unclosed `{lr`, a lone `}`
            raise UsageError(
                f"{path} line {line}: command is not a template ({exc}): write a parameter as {{lr}}, "
                "a literal brace as {{ or }}"
            ) from None
        if used - params:
            raise UsageError(
                f"{path} line {line}: command uses {{{', '.join(sorted(used - params))}}} "
                "that the space does not define"
            )
        if params - used:
            raise UsageError(
                f"{path} line {_line_of(text, ('space',))}: space defines {', '.join(sorted(params - used))} "
                "that the command never uses"
            )
        if sweep.metric.name not in sweep.reports:
            raise UsageError(
                f"{path} line {_line_of(text, ('metric',))}: metric {sweep.metric.name!r} is not among "
                f"what the trials report ({', '.join(sweep.reports) or 'reports: is empty'}): "
                "list it under `reports:`"
            )
    else:
        from gpuscout import workloads

        workloads.get(sweep.workload)
        unknown = params - WORKLOAD_PARAMS
        if unknown:
            raise UsageError(
                f"{path} line {_line_of(text, ('space',))}: {', '.join(sorted(unknown))} is not a "
                f"`gpuscout bench` option a workload sweep can vary ({', '.join(sorted(WORKLOAD_PARAMS))})"
            )
        fixed = set(sweep.bench) - WORKLOAD_PARAMS
        if fixed:
            raise UsageError(
                f"{path} line {_line_of(text, ('bench',))}: bench: {', '.join(sorted(fixed))} is not a "
                f"`gpuscout bench` option a workload sweep can set ({', '.join(sorted(WORKLOAD_PARAMS))})"
            )
        if set(sweep.bench) & params:
            raise UsageError(
                f"{path}: {', '.join(sorted(set(sweep.bench) & params))} is both in the space and fixed under bench:"
            )
        if sweep.early_stop is not None:
            raise UsageError(
                f"{path} line {_line_of(text, ('early_stop',))}: early_stop needs the metric each epoch, "
                "and a workload trial reports it once, at its end: early stopping is for a `command:` "
                "sweep of a script that trains with Model.fit"
            )
        if sweep.metric.name not in WORKLOAD_METRICS:
            raise UsageError(
                f"{path} line {_line_of(text, ('metric',))}: a workload trial never reports "
                f"{sweep.metric.name!r}: choose one of {', '.join(sorted(WORKLOAD_METRICS))}"
            )
