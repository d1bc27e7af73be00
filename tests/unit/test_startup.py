import subprocess
import sys

from gpuscout.analysis.stats import import_scipy_in_background, summarize


def test_the_cli_starts_without_importing_scipy_stats():
    # scipy.stats takes ~1.5 s to import; every command and every sweep trial paid it at start-up.
    probe = "import sys, gpuscout.cli; print(sorted(m for m in sys.modules if m.startswith('scipy.stats')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_summary_while_the_background_import_runs_waits_for_it():
    windows = [101.0, 99.0, 100.5, 98.0, 102.0]
    import_scipy_in_background()
    during = summarize(windows)  # may meet the import half done: the import lock makes it wait
    assert 98.0 <= during.ci95_low < during.median == 100.5 < during.ci95_high <= 102.0
    assert summarize(windows) == during
