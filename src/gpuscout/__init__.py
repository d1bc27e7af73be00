"""gpuscout: trustworthy training benchmarks for TensorFlow/Keras on NVIDIA GPUs.

The parent process (this package's CLI and library) never imports TensorFlow, JAX or Keras:
every measurement runs in a child process (see ``gpuscout.child.worker``).
"""

__version__ = "0.1.0"

# Bump whenever the way of measuring changes (docs/methodology.md); records of another
# methodology are never mixed in comparisons.
METHODOLOGY_VERSION = 1

# The stored record's shape (gpuscout.record; version 2: typed parts -- inference, cost,
# distribution --, units_per_sample, the record's kind). Here with the other versions, so that the
# ground floor (gpuscout.core's provenance) stamps it without importing the record above it.
SCHEMA_VERSION = 2


def load_ipython_extension(ipython) -> None:
    """`%load_ext gpuscout`: the %gpuscout and %%gpuscout magics (gpuscout.notebook.magics)."""
    from gpuscout.notebook.magics import load

    load(ipython)


def __getattr__(name: str):
    # `from gpuscout import InputSpec` in a user's model file, and the notebook API, without
    # importing either eagerly here (a watched script imports this package too).
    if name == "InputSpec":
        from gpuscout.workloads.user import InputSpec

        return InputSpec
    if name == "watching":
        from gpuscout.notebook.live import watching

        return watching
    if name in ("show", "doctor", "report", "compare"):
        import gpuscout.notebook

        return getattr(gpuscout.notebook, name)
    raise AttributeError(f"module 'gpuscout' has no attribute {name!r}")
