"""What a series of watched runs of one command shares (`tune -- COMMAND`'s session): one
instrumentation folder, and a warm interpreter for each environment its runs start under.

A run of a Keras script spends seconds before its first step importing Keras and its framework
(5.5 s a run of tests/fixtures/watch/tune_me.py on 2 CPU cores, of which 64 steps took under
one, 2026-12-07), and a session runs the same command under the same setting again and again (the
baseline beside each candidate, the confirmation's alternate runs). executor/warm.py's zygotes,
which a sweep's trials start from, serve these runs too: a zygote imports once under exactly the
environment a cold run would have, less gpuscout's own variables (tune's settings, the steps, the
windows: GPUSCOUT_TUNE and GPUSCOUT_WATCH_*), which no framework reads and the instrumentation
reads again once the fork holds the run's environment (core/events.on_environment). So one
interpreter serves every setting of a session and every step count, and a forked run is the cold
run less its imports; a setting that Keras' import reads (core/tune_settings.AT_KERAS_IMPORT)
starts cold. What a run is timed by, its whole epochs after the first, holds no import either way.
Before, each setting and step count had an interpreter of its own: a session of one change spent
4 s of its 42 importing Keras again for the change's first run and again for its confirmation
(tests/fixtures/watch/augments.py, 2 CPU cores, 2026-12-08).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpuscout.core.tune_settings import AT_KERAS_IMPORT
from gpuscout.executor.warm import Starter, WarmStarts
from gpuscout.measure.command import Command, Instrumentation, is_instrumentation_variable

# Warm interpreters alive at once: the baseline's, and the two settings a confirmation alternates
# with it or a round measures beside it; one more is made by closing the one used longest ago
# (each holds its frameworks in memory: about 0.5 GiB with Keras, JAX and TensorFlow imported)
MOST_WARM = 3


@dataclass
class Runs:
    instrumentation: Instrumentation
    warm: WarmStarts | None
    # the frameworks the runs said they imported (a script that imports Keras after code of its
    # own, which the scan of its top stops at): each new warm interpreter imports them too
    frameworks: list[str] = field(default_factory=list)
    # a copy of the script (tune's patched copy, in a folder of its own) -> the script whose warm
    # interpreter it forks from: the copy imports what the script does, so it starts as warm
    copies: dict[str, str] = field(default_factory=dict)

    @classmethod
    def begin(cls, log_folder: Path, warm: bool = True) -> Runs:
        """`log_folder`: where each warm interpreter's own output goes (what failed, if one did)."""
        # one interpreter serves every setting and step count: gpuscout's own variables are read
        # again by the fork (core/events.on_environment), never by a framework's import
        return cls(Instrumentation(), WarmStarts(log_folder, is_instrumentation_variable, MOST_WARM) if warm else None)

    def starter(self, command: Command, env: dict[str, str], settings: Mapping[str, object] | None) -> Starter | None:
        """How a run of `command` under `env` with tune's `settings` starts warm; None: cold (a
        setting applied as Keras loads, a shell line, a command that is not `python SCRIPT`, a
        script that sets its environment in code: executor/warm.py)."""
        if self.warm is None or command.shell or any((settings or {}).get(k) for k in AT_KERAS_IMPORT):
            return None
        like = self.copies.get(command.argv[1]) if len(command.argv) > 1 else None
        return self.warm.starter(command.argv, env, tuple(self.frameworks), like)

    def heard(self, frameworks: list[str]) -> None:
        """What a run of the series said it imported."""
        self.frameworks += [f for f in frameworks if f not in self.frameworks]

    def cold(self) -> Runs:
        """The same runs started cold (the first, which checks what no later run does; one whose
        warm interpreter died, run again): what they say is heard all the same."""
        return Runs(self.instrumentation, None, self.frameworks, self.copies)

    def close(self) -> None:
        if self.warm is not None:
            self.warm.close()
        self.instrumentation.close()
