"""A command stopped by Ctrl-C exits 130 (SIGTERM: 143), also when a second Ctrl-C comes while it
says it is ending: users press it twice, and a sweep found that once its trials stopped at once
(an uncaught KeyboardInterrupt after the last words ends Python by SIGINT itself: -2)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import SRC

# A command interrupted by a first Ctrl-C, and a second one arriving as it prints its last line
SECOND_CTRL_C = r"""
import os, signal, sys
import typer
from gpuscout import cli
from gpuscout.report import terminal

console = terminal.console

def twice(*args, **kwargs):
    c = console(*args, **kwargs)
    said = c.print

    def print_then_signal(*a, **k):
        said(*a, **k)
        os.kill(os.getpid(), int(sys.argv[1]))  # the second signal, delivered here
    c.print = print_then_signal
    return c

terminal.console = twice

def stopped():
    os.kill(os.getpid(), int(sys.argv[1]))  # the first
    signal.pause()

app = typer.Typer()
app.command()(cli.handle_errors(stopped))
cli.app = app
cli.main([])
"""


def test_a_second_stop_signal_while_the_command_ends_keeps_its_exit_status(tmp_path):
    import signal

    script = tmp_path / "twice.py"
    script.write_text(SECOND_CTRL_C)
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        done = subprocess.run(
            [sys.executable, str(script), str(int(sig))],
            capture_output=True,
            text=True,
            env={"PYTHONPATH": str(SRC)},
            timeout=60,
        )
        assert done.returncode == code, (sig, done.returncode, done.stderr[-2000:])
        assert f"interrupted ({sig.name})" in done.stderr
