"""A sweep's trials: its space expanded into them (a grid, or random draws), each one's key, and
its command made from the file's template."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import shlex
import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuscout.core.errors import UsageError
from gpuscout.measure.command import looks_like_shell
from gpuscout.sweep.spec import SweepFile, values_or_range


@dataclass(frozen=True)
class Trial:
    key: str  # the same parameters of the same sweep give the same key (what --resume matches)
    index: int
    params: dict


class _Quoted(string.Formatter):
    """str.format with each field's text quoted as one shell word."""

    def format_field(self, value, format_spec: str) -> str:
        return shlex.quote(format(value, format_spec))


def uses_shell(sweep: SweepFile) -> bool:
    if sweep.shell is not None:
        return sweep.shell
    literal = "".join(text for text, _, _, _ in string.Formatter().parse(sweep.command))
    return looks_like_shell(literal)


def argv_for(sweep: SweepFile, params: dict) -> list[str]:
    """The trial's command: the template filled in, split into words (or one /bin/sh line).
    ValueError, KeyError or IndexError when the template cannot take these values."""
    line = _Quoted().format(sweep.command, **params)
    return ["/bin/sh", "-c", line] if uses_shell(sweep) else shlex.split(line)


def check_commands(sweep: SweepFile, trials: list[Trial], path: Path) -> None:
    """Every trial's command rendered and split before the first starts: a template a value does
    not fit (`{x:d}` given a float) or an unclosed quote is a UsageError naming the trial."""
    if sweep.command is None:
        return
    for trial in trials:
        try:
            argv_for(sweep, trial.params)
        except (ValueError, KeyError, IndexError) as exc:
            raise UsageError(
                f"{path}: command cannot be made for trial {trial.index} {json.dumps(trial.params, default=str)}: {exc}"
            ) from None


def trial_key(sweep: SweepFile, params: dict) -> str:
    canonical = json.dumps({"sweep": sweep.name, "params": params}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


# A grid of more trials than this is not run point by point (the random strategy takes at most
# as many trials: Strategy.trials): even at a second a trial it is more than a day of trials.
MAX_GRID_POINTS = 100_000


def expand(sweep: SweepFile) -> list[Trial]:
    dims = {name: values_or_range(name, dim) for name, dim in sweep.space.items()}
    if sweep.strategy.kind == "grid":
        ranged = [n for n, (kind, _) in dims.items() if kind != "values"]
        if ranged:
            raise UsageError(
                f"a grid needs lists, not ranges ({', '.join(ranged)}): use strategy: {{kind: random, trials: N}}"
            )
        names = list(dims)
        points = math.prod(len(dims[n][1]) for n in names)  # counted from the axes, never enumerated
        if points > MAX_GRID_POINTS:
            sizes = " x ".join(str(len(dims[n][1])) for n in names)
            raise UsageError(
                f"the grid has {points:,} points ({sizes}), more than {MAX_GRID_POINTS:,}: sample it "
                "instead with strategy: {kind: random, trials: N}"
            )
        combos = [dict(zip(names, values)) for values in itertools.product(*(dims[n][1] for n in names))]
    elif sweep.strategy.kind == "tpe":  # proposed one by one from the results (sweep/search.py)
        if all(kind == "values" and len(arg) == 1 for kind, arg in dims.values()):
            raise UsageError("strategy tpe has nothing to search: every dimension of the space has one value")
        return []
    else:
        rng = np.random.default_rng(sweep.strategy.seed)
        combos = []
        for _ in range(sweep.strategy.trials):
            params = {}
            for name, (kind, arg) in dims.items():
                if kind == "values":
                    params[name] = arg[int(rng.integers(len(arg)))]
                elif kind == "uniform":
                    params[name] = float(rng.uniform(*arg))
                elif kind == "loguniform":
                    params[name] = float(math.exp(rng.uniform(math.log(arg[0]), math.log(arg[1]))))
                else:
                    params[name] = int(rng.integers(int(arg[0]), int(arg[1]) + 1))
            combos.append(params)
    seen, trials = set(), []
    for params in combos:
        key = trial_key(sweep, params)
        if key not in seen:  # a random search can draw the same point twice from lists
            seen.add(key)
            trials.append(Trial(key, len(trials), params))
    return trials
