"""Issue 75: the headline of a watched script is the user's own clock. A fit with validation data
and a callback that takes 60 ms at each epoch's end (tests/fixtures/watch/validated.py prints its
own clock): watch's throughput is its whole epochs' samples over their wall time, within 5% of
the script's clock; the steps' figure is named for what it is, beside where the rest of each
epoch went; the verdict names validation and the epoch's end; recommend --from keeps the host's
part of an epoch as it is and scales the validation."""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.cli_checks import records
from tests.conftest import FIXTURES, run_cli

PY = sys.executable
CLOCK = re.compile(r"clock epoch=(\d+) samples=(\d+) seconds=([0-9.]+)")


@pytest.mark.slow
def test_the_headline_is_the_script_s_own_epoch_clock(tmp_path):
    store = tmp_path / "results.sqlite"
    env = {"KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = run_cli(
        "watch", "--json", "--store", str(store), "--", PY, str(FIXTURES / "watch" / "validated.py"), env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    own = [(int(e), int(n), float(s)) for e, n, s in CLOCK.findall(done.stderr)]  # the script's stdout, under --json
    assert [e for e, _, _ in own] == list(range(1, 9))
    steady = own[1:]  # its first epoch holds the compile, as watch's
    script_rate = sum(n for _, n, _ in steady) / sum(s for _, _, s in steady)
    (run,) = json.loads(done.stdout)["runs"]
    clock = run["clock"]
    seconds = sum(e["seconds"] for e in clock["steady"])
    headline = sum(e["samples"] for e in clock["steady"]) / seconds
    assert len(clock["steady"]) == 7 and headline == pytest.approx(script_rate, rel=0.05)
    # the windows leave each epoch's validation and its 60 ms end out: their figure is far above it
    assert run["samples_per_s"] > 1.5 * headline
    cause = next(c for c in run["verdict"] if c["code"] == "epoch_outside_steps")
    assert re.search(r"validation \d+ ms \(\d+%, 32 batches\)", cause["evidence"]), cause["evidence"]
    assert re.search(r"the epoch's end (5\d|6\d|7\d|8\d) ms", cause["evidence"]), cause["evidence"]
    assert "Checkpoint takes the most" in cause["fix"]
    assert not any(c["code"] == "callbacks" for c in run["verdict"])  # named once, as the epoch's end
    # the screen: one figure called throughput, the steps' own named for what it is
    shown = run_cli("results", "show", run["id"], "--store", str(store))
    text = " ".join(shown.stdout.split())
    assert text.count("throughput") == 1 and "samples/s by its whole epochs (7 after the first" in text
    assert "the training steps alone:" in text and "the epoch's end 6" in text
    # recommend --from: the validation scaled with the GPU, the epoch's end and what comes between as this host's
    predicted = run_cli("recommend", "--from", run["id"], "--json", "--store", str(store))
    assert predicted.returncode == 0, predicted.stderr[-2000:]
    basis = json.loads(predicted.stdout)["from"]
    (stored,) = records(store).values()
    validation = sorted(e.validation_s for e in stored.clock.steady)[3]
    assert basis["epoch_overhead_s"] == pytest.approx(validation) and 0.055 <= basis["epoch_host_s"] < 0.2
