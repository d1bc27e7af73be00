"""One kind of change tune makes to a user's script (jit_compile, cache, ...), as Optuna's samplers
and hyperfine's exporters are each one module behind one base: its plan (when the baseline's
facts make it worth a run, what it is tried as, and otherwise why not), the rule that says so
before anything runs (`tune --dry-run` without a baseline), and the edits its patch writes
into the user's files. The child's side, what the change does in the running script, is
child/tune_overrides.py's, keyed by the settings the plan's changes carry.

Each module of tune/changes holds one kind and registers it (tune/changes/__init__.py); the
planner (tune/script.py), the patch (tune/patch.py), the dry run's rules (report/tune_script.py)
and `--only`/`--skip` read the registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from gpuscout.analysis.repeats import definition
from gpuscout.record.watch import CallSite, WatchedFit, WatchRecord
from gpuscout.tune.change import Change, Deferred
from gpuscout.tune.source_edits import Edit, NotLocated, call_at, insert_after_imports, own_name, wrap_input

# A file's edits, as tune/source_edits.apply takes them
FileEdits = list[tuple[Path, list[Edit]]]


@dataclass(frozen=True)
class Where:
    """What a change's patch is located from: where the baseline's run saw the script's calls
    (record.watch.CallSite by kind: compile, fit, input, map), the run itself, the script's folder,
    and the files' original texts as read so far (each file read once, every edit on its original)."""

    sites: dict[str, CallSite]
    baseline: WatchRecord
    root: Path
    originals: dict[Path, str]


def main_fit(r: WatchRecord) -> WatchedFit:
    """The run's main fit: the planner asks a kind only of a run that has one (tune/script.plan)."""
    if r.main is None:
        raise ValueError(f"run {r.id} timed no Keras fit: no change is planned from it")
    return r.main


def site(sites: dict[str, CallSite], kind: str, root: Path, what: str) -> tuple[Path, int]:
    """The file and line of the call of `kind` the run saw, inside the script's folder."""
    seen = sites.get(kind)
    if seen is None:
        raise NotLocated(f"where the script {what} was not seen")
    path = Path(seen.file).resolve()
    if not path.is_file() or root not in path.parents:
        raise NotLocated(f"{what} is in {seen.file}, outside the script's folder {root}")
    return path, seen.line


def original(path: Path, originals: dict[Path, str]) -> str:
    """The file's original text, read once: every edit is located in it."""
    if path not in originals:
        originals[path] = path.read_text()
    return originals[path]


def wrapped_input(where: Where, helper: str, wrap: str, need_keras: bool = False) -> FileEdits:
    """fit's input wrapped in one of child/fixes.py's helpers (`wrap`: "read_ahead({})"), its
    definition written after the imports under a name the file does not use yet."""
    path, line = site(where.sites, "fit", where.root, "called fit")
    text = original(path, where.originals)
    named, code = own_name(text, helper, definition(helper))
    return [
        (
            path,
            wrap_input(text, call_at(text, line, "fit"), wrap.replace(helper, named, 1))
            + insert_after_imports(text, code, need_keras=need_keras, name=named),
        )
    ]


class ChangeKind(ABC):
    """A kind of change: subclasses set `name` and `rule`, and define `plan` and `edits`."""

    name: str  # the knob: what --only and --skip name, Change.knob
    rule: str  # when it is tried, in a line: the dry run's plan without a baseline
    # Its place in a plan, the dry run and --help (tune/changes/__init__.py finds the kinds): the
    # compiled step first, what changes its arithmetic, then the input's changes, the batch, the devices
    listed: int
    # The order a round tries the input's changes in while the input caps the step (None: not an
    # input change): the one that removes the work before those that spread it
    input_rank: int | None = None
    # The knobs a change of this kind takes the place of: dropped from a setting it joins, and not
    # planned again on top of it (worker processes make a dataset's own threads idle)
    replaces: tuple[str, ...] = ()
    # The knobs that change what a change of this kind can buy: one that measured no faster on a
    # setting is tried first again once one of these joins the setting (mixed precision judged on a
    # batch of 32 says nothing of a batch of 512: issue 86, a ViT's bf16 never measured again)
    depends_on: tuple[str, ...] = ()
    # Multiplies the step's pace: measured first, in a round of its own, and made the base before
    # the changes whose worth depends on the step they are added to (mixed precision or a batch
    # measured on an op-by-op step say nothing of the compiled one; issue 60: 211x from jit_compile
    # on a small ViT left op by op, H200)
    paces: bool = False
    # Puts more work in each of the host's calls: where a GPU idle most of the time waits on those
    # calls, not the input, a round tries these first, in this order (None: not one of them). A
    # compiled step of a small batch left the H100 idle 70-80% of the time (the debugging-settings
    # ViT, docs/benchmarks.md): the largest batch tried first, where a budget may end the round
    work_rank: int | None = None
    # Spreads the step over devices the run left idle: tried first where the run left some unused
    # (the largest saving; the budget may end the round)
    spreads: bool = False
    # Tried again on top of itself while it keeps winning, the later replacing the earlier in the
    # setting: a larger batch where the last one paid (x2 and x4 stopped a compiled MLP at 0.41 of
    # the batch of 1,024 by hand, issue 60), and more workers (or processes) where the input still
    # waits (7 threads left an augmenting PyDataset waiting 31% of the time, processes untried)
    repeatable: bool = False
    # What the input still waits on once a change of this kind is kept, in the words of the advice
    # that follows "the best setting still waits on input" (tune/remainder.py; None: nothing of its
    # own to say). Where several are kept, the lowest input_rank's is said (the work removed first).
    input_left: str | None = None
    # Takes the host's calls between steps away (tune/remainder.py says what is left once it is kept,
    # measured no faster, or not tried)
    fewer_calls: bool = False
    # Makes a PyDataset's batches outside the GIL (worker processes): what a GIL-bound one is told of
    outside_gil: bool = False
    # Moves the step onto tensor cores (a float32 step on a GPU that has them names it)
    tensor_cores: bool = False

    @abstractmethod
    def plan(self, baseline: WatchRecord, script_batch: int | None) -> list[Change] | Deferred | str:
        """The changes of this kind the baseline's facts make worth a run, deferred ones (tried only
        on top of a change that lifts what caps them), or why none is."""

    def edits(self, change: Change, where: Where) -> FileEdits:
        """The patch's edits for `change`; NotLocated where they cannot be written."""
        raise NotLocated(f"{change.name} is not written by a patch yet: write the lines printed")
