"""Text a user typed, a hint or a path with square brackets is printed as it is, never taken for
rich markup (`pip install 'gpuscout[sweep]'` printed as `pip install 'gpuscout'`)."""

import io

from rich.console import Console

from gpuscout.report.sweep import print_summary
from gpuscout.sweep.results import SweepSummary


def printed(draw) -> str:
    out = Console(file=io.StringIO(), width=300, color_system=None)
    draw(out)
    return out.file.getvalue()


def test_the_sweep_summary_prints_brackets_as_they_are():
    summary = SweepSummary.model_validate(
        {
            "sweep": "lr[bold]",
            "metric": {"name": "acc[1]", "direction": "max"},
            "run_now": 1,
            "skipped_done": 0,
            "status_counts": {"ok": 1},
            "wall_s": 0.0,
            "gpu_idle_share": {},
            "stopped": "trial [red]3[/] failed",
            "best": [
                {
                    "index": 0,
                    "value": 0.9,
                    "params": {"opt": "[sgd]"},
                    "duration_s": 1.0,
                    "slot": "cpu0",
                    "epochs": 1,
                    "log_dir": "x",
                }
            ],
            "trials": 1,
            "timed_out": [],
            "diverged": [],
            "trial_seconds_sum": 0.0,
            "parallel_speedup": None,
            "trials_per_hour": None,
            "gpu_hours": 0.0,
            "gpu_busy_s": {},
            "gpu_gap_share": {},
            "gpu_drain_share": {},
            "cost_usd": None,
            "strategy": {"kind": "grid"},
            "early_stop": None,
            "log_root": "/data/[runs]/x",
            "notes": ["a note about [b]bold[/b]"],
            "tensorboard": {"logdir": None, "note": "no TensorBoard logs; pip install 'gpuscout[sweep]'"},
            "compilation_cache": {"folder": "/data/[runs]/x/xla-cache", "programs": 40, "hits": 31},
        }
    )
    text = printed(lambda out: print_summary(summary, out))
    for shown in (
        "sweep lr[bold]",
        "acc[1]",
        '"[sgd]"',
        "trial [red]3[/] failed",
        "/data/[runs]/x",
        "a note about [b]bold[/b]",
        "pip install 'gpuscout[sweep]'",
        "31 of 40 loaded from the sweeps' cache (/data/[runs]/x/xla-cache)",
    ):
        assert shown in text, shown
