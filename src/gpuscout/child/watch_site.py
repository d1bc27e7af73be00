"""Copied as `sitecustomize.py` onto a watched script's PYTHONPATH by `gpuscout watch`
(gpuscout/measure/command.py): instruments Keras in every Python process the command starts
(gpuscout.child.watch_hook), then runs the sitecustomize this one hides, if the environment has
one, so that nothing the script relied on changes. Imported under any other name it does nothing."""

import os
import sys


def _run_the_hidden_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        folder = os.path.abspath(entry or os.getcwd())
        candidate = os.path.join(folder, "sitecustomize.py")
        if folder != here and os.path.isfile(candidate):
            import importlib.util

            spec = importlib.util.spec_from_file_location("_gpuscout_hidden_sitecustomize", candidate)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


if __name__ == "sitecustomize":
    try:
        from gpuscout.child import watch_hook

        watch_hook.install()
    except Exception as exc:  # never the script's problem: say so once, and let it run
        sys.stderr.write(f"gpuscout watch: instrumentation not installed ({type(exc).__name__}: {exc})\n")
    _run_the_hidden_sitecustomize()
