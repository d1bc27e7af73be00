"""Whether the setting tune's search chose is faster, decided between runs made after the choice.

The search picks, round by round, the change whose run beat the reference runs beside it
(tune/search.py). That pick is a screening: it compares the epochs or windows of one run with
those of two others, which share their process, their neighbour and their clocks and so agree far
better than runs do (issue 86: a thread setting "1.44x [1.32-1.61] faster" in its round read
1.03x [0.87-1.50] at the end and 0.83x in a second session; by the script's own clock, no gain).
And of several candidates the one that drew the luckiest run is picked: its round's figure is
biased upwards however it was measured.

So nothing is kept on the round's evidence. After the search, the chosen setting and the
baseline are run alternately (ABAB, who goes first alternating: a drift of the host weighs on
both sides alike), each run one value by the user's clock (its whole steady epochs, validation and
callbacks in; its windows' median only where a run held no whole epoch), and the two sides are
tested between runs (analysis/between_runs.pooled_test: the ratio of their geometric means, its
interval from the spread between runs on the log scale, pooled from both sides and from the other
settings the session ran more than once, each about its own mean). Sequentially:

- confirmed where the interval's low end clears CONFIRM_MARGIN;
- not confirmed where its high end falls under it (no gain worth the change);
- else another pair of runs, until MOST_RUNS a side, the budget, or a projection
  (between_runs.runs_to_settle) that even MOST_RUNS would not settle it: then "undecided", with how
  many runs a side would.

A 10x cache is confirmed by two runs a side; a 5% change on a host whose runs spread 3% needs
five or six. A setting far past the baseline (trials.Outcome.clear, 3x by its round's low ends)
starts from the warm baseline runs of round 1 and one run of its own: a drift of a few percent
cannot make 3x, and on an H100 a ViT left op by op spent 30 s a baseline run (issue 60).

This module decides what runs and reads what they say; `run` makes them (tune/runs.py), so its
tests run it on records made by hand.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuscout.analysis.between_runs import BY_EPOCHS, BY_WINDOWS, RunTest, pooled_test, runs_to_settle
from gpuscout.core.tune_settings import TuneSettings
from gpuscout.core.units import counted
from gpuscout.record.watch import WatchRecord
from gpuscout.tune import judging
from gpuscout.tune.budget import Budget
from gpuscout.tune.trials import Config, Outcome

# The speed-up a confirmed setting's 95% interval between runs lies above: a gain of 1% or more.
# Below it a change is not worth the lines it asks for, and a host's drift of a few tenths of a
# percent between the sides (the ABAB order takes out most of it) cannot pass for one.
CONFIRM_MARGIN = 1.01
# Runs a side before the first test (the fewest with a spread of their own), and the most
CONFIRM_FIRST = 2
MOST_RUNS = 6

CONFIRMED = "confirmed"
NOT_CONFIRMED = "not confirmed"
UNDECIDED = "undecided"


@dataclass
class Confirmed:
    """The chosen setting against the baseline, between runs made after its choice."""

    setting: Config
    baseline: list[WatchRecord] = field(default_factory=list)
    best: list[WatchRecord] = field(default_factory=list)
    basis: str = BY_EPOCHS  # how each run is read: between_runs.BY_EPOCHS or BY_WINDOWS
    tested: RunTest | None = None
    verdict: str = UNDECIDED
    reason: str = ""
    needed: int | None = None  # about how many runs a side would settle it, where undecided
    from_round_one: int = 0  # the baseline's runs taken from round 1 (a setting 3x past it: Outcome.clear)
    # the session's other settings run more than once at one count (runs, the setting's settings):
    # their spread is pooled into the test's
    beside: list[tuple[list[WatchRecord], TuneSettings]] = field(default_factory=list)

    @property
    def confirmed(self) -> bool:
        return self.verdict == CONFIRMED

    def spread_groups(self, batch: int | None) -> list[list[float]]:
        """Each repeated setting's runs' figures (none of the two sides' own runs), read as `basis`."""
        own = {r.id for r in (*self.baseline, *self.best)}
        groups = []
        for runs, settings in self.beside:
            values = [run_figure(r, settings, batch, self.basis) for r in runs if r.id not in own]
            if len(values) > 1 and all(values):
                groups.append(values)
        return groups

    def values(self, batch: int | None) -> tuple[list[float], list[float]]:
        """(the baseline's runs' figures, the best's), each run read as `basis`."""
        return (
            [run_figure(r, TuneSettings(), batch, self.basis) for r in self.baseline],
            [run_figure(r, self.setting.settings, batch, self.basis) for r in self.best],
        )


def _own_batch(settings: TuneSettings, batch: int | None) -> int | None:
    """The samples of a step where a run did not count them: the baseline's batch, never for a
    setting with a batch of its own (judging.judged's own_batch)."""
    return None if settings.batch_size is not None else batch


def run_figure(r: WatchRecord, settings: TuneSettings, batch: int | None, basis: str) -> float:
    """One run's one value: samples/s over its whole steady epochs (a cache's filling ones left
    out), or the median of its steady windows."""
    if basis == BY_EPOCHS:
        clock = judging.clocks([r], settings, _own_batch(settings, batch))
        return float(clock[0].samples_per_s or 0.0) if clock else 0.0
    windows = judging.rates(r, _own_batch(settings, batch), judging.fill_steps(settings))
    return float(statistics.median(windows)) if windows else 0.0


def basis_of(runs: list[tuple[WatchRecord, TuneSettings]], batch: int | None) -> str:
    """By whole epochs where every run compared held a steady one (read as run_figure reads it),
    else by the windows: every run of a test is read the same way (between_runs.basis)."""
    held = all(judging.clocks([r], settings, _own_batch(settings, batch)) for r, settings in runs)
    return BY_EPOCHS if runs and held else BY_WINDOWS


def warm_baselines(found: Outcome) -> list[WatchRecord]:
    """The search's warm baseline runs (the references beside candidates added to the baseline),
    in the order they ran; never the cold probe, which no trial holds."""
    seen: dict[str, WatchRecord] = {}
    for t in found.trials:
        if not t.reference.changes:
            seen.update({r.id: r for r in t.beside})
    return list(seen.values())


def repeated(found: Outcome) -> list[tuple[list[WatchRecord], TuneSettings]]:
    """The session's settings run more than once at one count in the search (a reference beside its
    candidates, a leader measured again), each group its runs and the setting's settings: the
    spread the confirmation pools (never the cold probe, which no trial holds)."""
    groups: dict[tuple[str, int], tuple[dict[str, WatchRecord], TuneSettings]] = {}
    for t in found.trials:
        for config, runs in ((t.reference, t.beside), (t.config, t.runs)):
            for r in runs:
                if r.ok and r.main is not None and not r.main.stopped_by_limit:
                    groups.setdefault((config.name, r.main.steps), ({}, config.settings))[0][r.id] = r
    return [(list(runs.values()), settings) for runs, settings in groups.values() if len(runs) > 1]


def confirm(
    run: Callable[..., WatchRecord],
    found: Outcome,
    budget: Budget,
    base_steps: int,
    best_steps: int,
    batch: int | None,
    kept_back: list[float],
    beside: list[tuple[list[WatchRecord], TuneSettings]] | None = None,
) -> Confirmed:
    """The chosen setting (`found.best`) and the baseline run alternately until the test between
    them settles, the budget (less `kept_back`, the patched copy) ends, or MOST_RUNS a side."""
    out = Confirmed(found.best, beside=beside or [])
    best = found.best
    if found.clear:  # round 1's warm baseline runs (never the cold probe), and one run of its own
        counts = {r.main.steps for r in found.path[0].beside if r.main is not None}
        out.baseline = [r for r in warm_baselines(found) if r.ok and r.main is not None and r.main.steps in counts]
        out.from_round_one = len(out.baseline)
    pair = 0
    while True:
        order: tuple[Config, ...] = (best, Config()) if pair % 2 else (Config(), best)
        if found.clear and not out.best:
            order = (best,)
        for config in order:
            side = out.best if config.changes else out.baseline
            count = best_steps if config.changes else base_steps
            if len(side) >= MOST_RUNS:
                continue
            if not budget.allows([budget.cost(config.name, count), *kept_back]):
                out.reason = f"the --budget-minutes held {len(out.baseline)} and {len(out.best)} runs"
                return _settled(out, batch, final=True)
            name = "baseline again" if not config.changes else f"{config.name} (confirming)"
            record = run(config, name, count)
            if record.status == "interrupted":
                raise KeyboardInterrupt
            budget.seen(record, config.name)
            side.append(record)
            if not record.ok:
                out.verdict, out.reason = (
                    NOT_CONFIRMED,
                    f"a run of {'it' if config.changes else 'the baseline'} ended {record.status}",
                )
                return out
        pair += 1
        if min(len(out.baseline), len(out.best)) >= 1 and len(out.baseline) + len(out.best) >= CONFIRM_FIRST * 2 - 1:
            full = len(out.baseline) >= MOST_RUNS and len(out.best) >= MOST_RUNS
            _settled(out, batch, final=full)
            # settled, or more runs would not settle it: a projection past MOST_RUNS stops it early
            if out.verdict != UNDECIDED or full or out.needed is None or out.needed > MOST_RUNS:
                out.reason = out.reason or ("" if out.verdict != UNDECIDED else _beyond(out))
                return out


def _settled(out: Confirmed, batch: int | None, final: bool) -> Confirmed:
    """The test of the runs so far, and its verdict; `final`: no more runs will be made."""
    out.basis = basis_of(
        [(r, TuneSettings()) for r in out.baseline] + [(r, out.setting.settings) for r in out.best], batch
    )
    base, best = out.values(batch)
    if not all(base + best):
        out.verdict, out.reason = NOT_CONFIRMED, "a run's speed could not be read"
        return out
    out.tested = pooled_test(base, best, out.spread_groups(batch)) if base and best else None
    if out.tested is None:
        out.verdict = UNDECIDED
        out.reason = out.reason or "one run a side, and no setting run twice: nothing says how far runs fall apart here"
        return out
    if out.tested.ratio_low >= CONFIRM_MARGIN:
        out.verdict, out.reason, out.needed = CONFIRMED, "", None
    elif out.tested.ratio_high < CONFIRM_MARGIN:
        out.verdict, out.needed = NOT_CONFIRMED, None
        out.reason = f"its runs are no faster than the baseline's by {CONFIRM_MARGIN - 1:.0%} or more"
    else:
        out.verdict = UNDECIDED
        out.needed = runs_to_settle(out.tested, CONFIRM_MARGIN)
        if final and not out.reason:
            out.reason = _beyond(out)
    return out


def _beyond(out: Confirmed) -> str:
    runs = f"{len(out.baseline)} and {len(out.best)} runs"
    if out.needed is None:
        return f"{runs} left it undecided, and at the spread they show no count of runs would settle it"
    return f"{runs} left it undecided; about {out.needed} runs a side would settle it"


def explained(out: Confirmed) -> str:
    """The verdict in a sentence, with the reason where it is not confirmed."""
    if out.confirmed:
        if out.from_round_one:
            return (
                f"confirmed by {counted(len(out.best), 'run')} of it after the search against "
                f"{counted(len(out.baseline), 'baseline run')} ({out.from_round_one} of round 1's: past 3x, no drift "
                "between them matters)"
            )
        return f"confirmed by {len(out.baseline)} and {len(out.best)} runs, alternating"
    why = out.reason or _beyond(out)
    if out.verdict == UNDECIDED and out.needed and "would settle" not in why:
        why += f"; about {out.needed} runs a side would settle it"
    return f"{out.verdict}: {why}"


def verdict_of(tested: RunTest) -> str:
    """The test's own word, at 95%: faster or slower where the interval between runs excludes 1."""
    if tested.ratio_low > 1:
        return "faster"
    if tested.ratio_high < 1:
        return "slower"
    return "no significant difference"


def spread_note(out: Confirmed, batch: int | None) -> str | None:
    """The baseline's runs' spread where it is wide (past judging.NOISY_SHARE): the interval between
    runs holds it, and says so. Never from the cold first run (the probe is not among them)."""
    base, _ = out.values(batch)
    if len(base) < 2 or min(base) <= 0:
        return None
    apart = max(base) / min(base) - 1
    if apart <= judging.NOISY_SHARE:
        return None
    return (
        f"the baseline's {len(base)} runs after the search ran at {min(base):,.0f} to {max(base):,.0f} samples/s "
        f"({apart:.0%} apart): the machine was noisy, and the interval between runs is as wide as that"
    )
